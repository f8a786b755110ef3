"""Writes for Groves: enrollment tokens, enrollment, heartbeats, credentials, staleness."""
from __future__ import annotations

import functools
import json
import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.text import slugify

from apps.core.db import advisory_locks, instance_from_row, select_columns, sql_from_meta
from apps.core.errors import Conflict, Forbidden, Gone, NotAuthenticated, ValidationFailed
from apps.groves import hooks, mesh, rules, secrets
from apps.groves.choices import CapabilityKind, Role, Substrate
from apps.groves.models import (
    AcceleratorInventoryItem,
    CapacityReport,
    EnrollmentToken,
    Grove,
    GroveCapability,
    GroveCredential,
    PlacementUnit,
)

log = logging.getLogger(__name__)


def enrollment_token_create(*, roles: list[str], substrate: str, expires_in_s: int | None = None,
                            note: str = "", created_by=None) -> tuple[EnrollmentToken, str]:
    """A one-time token; the returned string is the only time the secret exists in clear."""
    roles = [r.strip() for r in roles if r.strip()]
    if not roles:
        raise ValidationFailed("field_blank", "Give at least one role (build, runtime, compute).", field="roles")
    bad = [r for r in roles if r not in Role.values]
    if bad:
        raise ValidationFailed("invalid_choice", f"Unknown role '{bad[0]}'; use {', '.join(Role.values)}.",
                               field="roles")
    if substrate not in Substrate.values:
        raise ValidationFailed("invalid_choice", f"Substrate must be one of {', '.join(Substrate.values)}.",
                               field="substrate")
    ttl = settings.ENROLLMENT_TOKEN_DEFAULT_TTL_S if expires_in_s is None else expires_in_s
    if ttl <= 0 or ttl > 90 * 24 * 3600:
        raise ValidationFailed("out_of_range", "Expiry must be between 1 second and 90 days.", field="expires_in")
    presented, key_id, secret_hash = secrets.new_secret(secrets.TOKEN_PREFIX)
    token = EnrollmentToken.objects.create(
        key_id=key_id, secret_hash=secret_hash, roles=sorted(set(roles)), substrate=substrate, note=note,
        expires_at=timezone.now() + timedelta(seconds=ttl),
        created_by=created_by if getattr(created_by, "pk", None) else None,
    )
    return token, presented


SLUG_LOCK_CLASS = 0x4753  # pg_advisory_xact_lock(class, hashtext(base)): a Grove slug being chosen


def _unique_slug(name: str) -> str:
    base = slugify(name)[:80] or "grove"
    slug, n = base, 1
    while Grove.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def _capabilities(grove: Grove) -> list[GroveCapability]:
    rows = []
    for kind, values in (
        (CapabilityKind.ROLE, grove.roles),
        (CapabilityKind.PLATFORM, grove.platforms),
        (CapabilityKind.CHANGE_KIND, grove.change_kinds),
        (CapabilityKind.ISOLATION, grove.isolation_modes),
        (CapabilityKind.ACCELERATOR_API,
         sorted({api for item in grove.capacity.get("accelerators", []) for api in item["apis"]})),
    ):
        rows.extend(GroveCapability(grove=grove, kind=kind, value=value, rank=rank)
                    for rank, value in enumerate(values))
    return rows


def grove_capabilities_sync(*, grove: Grove) -> None:
    GroveCapability.objects.filter(grove=grove).delete()
    GroveCapability.objects.bulk_create(_capabilities(grove))


def grove_create(*, name: str, substrate: str, roles: list[str], platforms: list[str],
                 slug: str = "", version: str = "", simulated: bool = False) -> Grove:
    """Create a Grove directly (enrollment, demo data, tests); platforms are validated and normalised.
    ``simulated``: a demo Grove whose reports Host makes up (nothing runs its jobs). Two enrollments of one
    name at once take turns on the slug (a lock on its base), so the later one gets ``name-1``, not a 500."""
    if not slug:
        advisory_locks(SLUG_LOCK_CLASS, [slugify(name)[:80] or "grove"])
    grove = Grove.objects.create(
        slug=slug or _unique_slug(name), name=name, substrate=substrate, roles=roles,
        platforms=rules.platforms(platforms), version=version, simulated=simulated,
    )
    grove_capabilities_sync(grove=grove)
    return grove


def _issue_credential(grove: Grove) -> str:
    presented, key_id, secret_hash = secrets.new_secret(secrets.CREDENTIAL_PREFIX)
    GroveCredential.objects.create(grove=grove, key_id=key_id, secret_hash=secret_hash)
    return presented


@transaction.atomic
def grove_enroll(*, body: dict) -> tuple[Grove, str]:
    """Spend a one-time token to create a Grove and its first credential."""
    data = rules.enrollment(body)
    parts = secrets.split(data["token"], secrets.TOKEN_PREFIX)
    token = None
    if parts:
        token = EnrollmentToken.objects.select_for_update().filter(key_id=parts[0]).first()
    if token is None or parts is None or not secrets.matches(parts[1], token.secret_hash):
        raise NotAuthenticated("enrollment_token_unknown", "This enrollment token is not known to Host.",
                               field="token")
    if token.used_at is not None:
        raise Gone("enrollment_token_used", "This enrollment token was already used; ask for a new one.",
                   field="token")
    if token.expires_at <= timezone.now():
        raise Gone("enrollment_token_expired", "This enrollment token has expired; ask for a new one.",
                   field="token")
    if data["substrate"] != token.substrate:
        raise Forbidden("substrate_mismatch",
                        f"This token enrolls a {token.substrate} Grove, not a {data['substrate']} one.",
                        field="substrate")
    grove = grove_create(name=data["name"], substrate=data["substrate"], roles=token.roles,
                         platforms=data["platforms"], version=data["version"])
    token.used_at = timezone.now()
    token.grove = grove
    token.save(update_fields=["used_at", "grove"])
    credential = _issue_credential(grove)
    log.info("grove enrolled", extra={"grove": grove.slug, "substrate": grove.substrate})
    return grove, credential


# --- the Grove credential check ---------------------------------------------------------------------------
# One rule: a presented value ``fgc_<key id>.<secret>`` authenticates the Grove of the credential row with
# that key id, when the row is not revoked and the secret's hash is the row's. ``grove_authenticate`` is the
# rule (with a code per refusal); where SQL must apply it inside a statement (the heartbeat's one statement,
# on PostgreSQL) it is ``credential_sql``, and on the embedded SQLite ``live_credentials``, both right here.
# tests/groves/test_credential_twin.py holds the three to the same answer for every kind of presented value;
# every caller (the DRF authentication, ``grove_for_request``, the lean routes) goes through one of them.

def grove_authenticate(*, presented: str) -> GroveCredential:
    """The live credential for a bearer value, with its Grove; raises 401 with a code otherwise."""
    parts = secrets.split(presented, secrets.CREDENTIAL_PREFIX)
    credential = None
    if parts:
        grove = next(iter(Grove.objects.raw(_credential_read_sql(), [parts[0]])), None)
        credential = None if grove is None else instance_from_row(GroveCredential, grove, prefix="c_")
        if credential is not None:
            credential.grove = grove
    if credential is None or parts is None or not secrets.matches(parts[1], credential.secret_hash):
        raise NotAuthenticated("credential_unknown", "This Grove credential is not known to Host.")
    if credential.revoked_at is not None:
        raise NotAuthenticated("credential_revoked", "This Grove credential was revoked; enroll again.")
    return credential


@functools.cache
def credential_sql(key_id: str) -> str:
    """The rule inside a statement: the live credential row (``grove_id``, ``secret_hash``) whose key id is
    the SQL expression ``key_id``; the caller compares the Grove and the secret's hash. One probe of the
    unique key-id index (``OFFSET 0`` keeps a LATERAL join a per-row lookup: docs/decisions.md)."""
    return sql_from_meta("SELECT c.{c.grove} AS grove_id, c.{c.secret_hash} AS secret_hash FROM {c} c "
                         "WHERE c.{c.key_id} = " + key_id + " AND c.{c.revoked_at} IS NULL OFFSET 0",
                         c=GroveCredential)


def live_credentials(*, key_id: str, secret_hash: str):
    """The rule through the ORM (the embedded SQLite's twin of ``credential_sql``, the hash compared too)."""
    return GroveCredential.objects.filter(key_id=key_id, secret_hash=secret_hash, revoked_at__isnull=True)


@functools.cache
def _credential_read_sql() -> str:
    # Every Grove call reads this row: SQL from the models' metadata (apps.core.db.select_columns). The
    # reported capacity and log tail can be large and no wire view needs them from here (deferred).
    return sql_from_meta(f"SELECT {select_columns(Grove, alias='g', exclude=('capacity', 'log_tail'))}, "
                         f"{select_columns(GroveCredential, alias='c', prefix='c_')} FROM {{c}} c "
                         "JOIN {g} g ON g.{g.id} = c.{c.grove} WHERE c.{c.key_id} = %s",
                         g=Grove, c=GroveCredential)


def grove_credential_revoke(*, credential: GroveCredential, reason: str = "") -> None:
    if credential.revoked_at is None:
        credential.revoked_at = timezone.now()
        credential.revoked_reason = reason[:200]
        credential.save(update_fields=["revoked_at", "revoked_reason"])


def _capacity_replace(grove: Grove, capacity: dict) -> None:
    PlacementUnit.objects.filter(grove=grove).delete()
    AcceleratorInventoryItem.objects.filter(grove=grove).delete()
    PlacementUnit.objects.bulk_create([
        PlacementUnit(
            grove=grove, unit_id=unit["id"],
            cpu_milli_allocatable=unit["cpu_milli"]["allocatable"], cpu_milli_free=unit["cpu_milli"]["free"],
            memory_bytes_allocatable=unit["memory_bytes"]["allocatable"],
            memory_bytes_free=unit["memory_bytes"]["free"], accelerators=unit["accelerators"],
        )
        for unit in capacity["placement_units"]
    ])
    AcceleratorInventoryItem.objects.bulk_create([
        AcceleratorInventoryItem(
            grove=grove, inventory_id=item["id"], kind=item["kind"], vendor=item["vendor"], model=item["model"],
            apis=item["apis"], memory_bytes=item["memory_bytes"], memory_kind=item["memory_kind"],
            memory_enforced=item["memory_enforced"], share_mode=item["share_mode"],
        )
        for item in capacity["accelerators"]
    ])


def _liveness_fields(data: dict, now) -> dict:
    mesh = data["mesh"] or {}
    fields = {"last_heartbeat_at": now, "version": data["version"], "stale_since": None,
              "mesh_address": mesh.get("address"), "mesh_proxy_port": mesh.get("proxy_port")}
    if data["log_tail"]:
        fields["log_tail"] = data["log_tail"][-settings.GROVE_LOG_TAIL_LINES:]
    return fields


# One statement records a batch of heartbeats whose shapes are unchanged, authenticating each row that
# carries a credential: `live` for a row whose free counts are unchanged too (liveness columns only, none
# indexed: a HOT update), `moved` for one whose free counts changed (the capacity JSON, the free digest and
# each unit's free columns). Their conditions exclude each other, so at most one writes a row, and both
# keep their guards in the UPDATE's own WHERE, which PostgreSQL re-checks against a row another
# transaction changed meanwhile. It returns the Grove rows written (with whether their free counts
# moved); a row not returned sends its caller to the full path. One Grove appears at most once per batch
# (an UPDATE ... FROM joining two input rows to one target row writes it once, with either).
# The lean route (apps/dispatch/api/lean.py) sends the heartbeats that arrive while its previous batch is
# in flight as one batch (group commit: every answer still waits for its row's commit); the Django path
# sends a batch of one.
@functools.cache
def heartbeat_sql() -> str:
    """The statement (PostgreSQL; ``%(rows)s`` is ``heartbeat_rows_params``), names from the models' metadata."""
    return sql_from_meta("""
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS r(grove uuid, key_id text, secret_hash text,
        at timestamptz, version text, log_tail jsonb, shape text, free text, capacity jsonb, units jsonb,
        mesh_address inet, mesh_proxy_port integer)
), authed AS (
    SELECT i.* FROM input i LEFT JOIN LATERAL (""" + credential_sql("i.key_id") + """) c ON true
    WHERE i.key_id IS NULL OR (c.grove_id = i.grove AND c.secret_hash = i.secret_hash)
), live AS (
    UPDATE {g} g SET {g.last_heartbeat_at} = a.at, {g.version} = a.version, {g.stale_since} = NULL,
                     {g.log_tail} = COALESCE(a.log_tail, g.{g.log_tail}),
                     {g.mesh_address} = a.mesh_address, {g.mesh_proxy_port} = a.mesh_proxy_port
    FROM authed a WHERE g.{g.id} = a.grove AND g.{g.capacity_digest} = a.shape AND g.{g.free_digest} = a.free
        AND g.{g.mesh_address} IS NOT DISTINCT FROM a.mesh_address
        AND g.{g.mesh_proxy_port} IS NOT DISTINCT FROM a.mesh_proxy_port
    RETURNING g.{g.id} AS id
), moved AS (
    UPDATE {g} g SET {g.last_heartbeat_at} = a.at, {g.version} = a.version, {g.stale_since} = NULL,
                     {g.log_tail} = COALESCE(a.log_tail, g.{g.log_tail}), {g.capacity} = a.capacity,
                     {g.free_digest} = a.free, {g.capacity_reported_at} = a.at,
                     {g.mesh_address} = a.mesh_address, {g.mesh_proxy_port} = a.mesh_proxy_port
    FROM authed a WHERE g.{g.id} = a.grove AND g.{g.capacity_digest} = a.shape AND g.{g.free_digest} <> a.free
        AND g.{g.mesh_address} IS NOT DISTINCT FROM a.mesh_address
        AND g.{g.mesh_proxy_port} IS NOT DISTINCT FROM a.mesh_proxy_port
    RETURNING g.{g.id} AS id, a.units
), units AS (
    UPDATE {u} u SET {u.cpu_milli_free} = f.cpu, {u.memory_bytes_free} = f.memory,
                     {u.accelerators} = f.accelerators
    FROM moved m, jsonb_to_recordset(m.units) AS f(unit_id text, cpu bigint, memory bigint, accelerators jsonb)
    WHERE u.{u.grove} = m.id AND u.{u.unit_id} = f.unit_id
    RETURNING 1
)
SELECT id::text, false FROM live UNION ALL SELECT id::text, true FROM moved
""", g=Grove, u=PlacementUnit)


@functools.lru_cache(maxsize=4)
def _mesh_policy(networks: tuple, ports: str, edge_bind: str, listens: tuple, urls: tuple,
                 reserved: tuple) -> mesh.MeshPolicy:
    low, _, high = ports.partition("-")
    try:
        port_min, port_max = int(low), int(high or low)
    except ValueError:
        port_min, port_max = 1024, 65535  # a malformed setting falls back to the documented default
    forbidden = mesh.own_addresses(edge_bind=edge_bind, listens=listens, service_urls=urls)
    return mesh.MeshPolicy(networks=networks, forbidden=forbidden | mesh.own_addresses(
        edge_bind="", listens=reserved, service_urls=()), port_min=max(1, port_min), port_max=min(65535, port_max))


def mesh_policy() -> mesh.MeshPolicy:
    """The operator's mesh (``apps.groves.mesh``) from settings: the heartbeat and the edge both check it."""
    return _mesh_policy(tuple(settings.FOREST_MESH_NETWORKS), settings.FOREST_MESH_PROXY_PORTS,
                        settings.FOREST_EDGE_PROXY_BIND,
                        (settings.FOREST_EDGE_HTTP_LISTEN, settings.FOREST_EDGE_HTTPS_LISTEN),
                        tuple(settings.FOREST_OWN_SERVICE_URLS), tuple(settings.FOREST_MESH_RESERVED))


MESH_LOCK_CLASS = 0x4D65  # pg_advisory_xact_lock(class, key) namespace for "a mesh address is claimed"
MESH_TAKEN_ACTION = "grove.mesh_address_refused"


def _mesh_claim(grove: Grove, data: dict) -> None:
    """Record a changed mesh address, unique among live Groves: under a lock on the address, a live Grove
    (not stale) already holding it refuses this one (``409 mesh_address_taken`` and an audit event); a
    stale holder loses it (its next heartbeat claims again). An unchanged address costs nothing here: the
    one statement accepts only a mesh equal to the stored one, so every change comes through this."""
    reported = data["mesh"] or {}
    address, port = reported.get("address"), reported.get("proxy_port")
    if (address, port) == (grove.mesh_address, grove.mesh_proxy_port):
        return
    holder = None
    with transaction.atomic():
        advisory_locks(MESH_LOCK_CLASS, [address] if address else [])
        others = Grove.objects.filter(mesh_address=address).exclude(pk=grove.pk) if address else Grove.objects.none()
        cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
        holder = others.filter(stale_since__isnull=True, last_heartbeat_at__gte=cutoff).first()
        if holder is None:
            others.update(mesh_address=None, mesh_proxy_port=None)
            Grove.objects.filter(pk=grove.pk).update(mesh_address=address, mesh_proxy_port=port)
            grove.mesh_address, grove.mesh_proxy_port = address, port
    if holder is not None:
        from apps.accounts.choices import AuditVia
        from apps.accounts.services import audit_record

        audit_record(actor=None, actor_label=f"grove:{grove.slug}", via=AuditVia.API, action=MESH_TAKEN_ACTION,
                     target_type="groves.grove", target_id=grove.pk,
                     detail={"address": address, "port": port, "held_by": holder.slug})
        log.warning("mesh address refused: held by another live Grove",
                    extra={"grove": grove.slug, "address": address, "held_by": holder.slug})
        raise Conflict("mesh_address_taken", f"Mesh address {address} is already reported by another live Grove; "
                       "each Grove's proxy has an address of its own.", field="mesh.address")


def heartbeat_row(*, grove_id, data: dict, now, credential: tuple[str, str] | None) -> dict:
    """One row of ``heartbeat_sql()`` for a validated heartbeat (``credential``: key id and secret to check,
    None when the caller has already authenticated the Grove); JSON-ready."""
    shape, free = rules.capacity_digests(data["capacity"], data["change_kinds"], data["isolation"])
    tail = data["log_tail"][-settings.GROVE_LOG_TAIL_LINES:] if data["log_tail"] else None
    units = [{"unit_id": u["id"], "cpu": u["cpu_milli"]["free"], "memory": u["memory_bytes"]["free"],
              "accelerators": u["accelerators"]} for u in data["capacity"]["placement_units"]]
    mesh = data["mesh"] or {}
    return {"grove": str(grove_id), "key_id": credential[0] if credential else None,
            "secret_hash": secrets.hash_secret(credential[1]) if credential else None, "at": now.isoformat(),
            "version": data["version"], "log_tail": tail, "shape": shape, "free": free,
            "capacity": data["capacity"], "units": units, "mesh_address": mesh.get("address"),
            "mesh_proxy_port": mesh.get("proxy_port")}


def heartbeat_rows_params(rows: list[dict]) -> dict:
    """``heartbeat_sql()``'s parameters for a batch of ``heartbeat_row`` rows, one Grove at most once."""
    return {"rows": json.dumps(rows, separators=(",", ":"))}


def heartbeat_rows_run(rows: list[dict]) -> dict[str, bool]:
    """Run ``heartbeat_sql()`` (PostgreSQL), or the same guarded writes through the ORM on the embedded
    SQLite of ``make run``: {Grove id written: its free counts moved}. Capacity-moved hooks run after
    commit for the rows that moved."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(heartbeat_sql(), heartbeat_rows_params(rows))
            written = dict(cursor.fetchall())
    else:
        written = {row["grove"]: moved for row in rows if (moved := _heartbeat_row_orm(row)) is not None}
    if moved_ids := [grove_id for grove_id, moved in written.items() if moved]:
        transaction.on_commit(lambda: hooks.capacity_moved(moved_ids))
    return written


def _heartbeat_row_orm(row: dict) -> bool | None:
    """``heartbeat_sql()`` for one row through the ORM: None (not written), False (live) or True (moved)."""
    grove = Grove.objects.filter(pk=row["grove"], capacity_digest=row["shape"], mesh_address=row["mesh_address"],
                                 mesh_proxy_port=row["mesh_proxy_port"])
    if row["key_id"] is not None:
        grove = grove.filter(Exists(live_credentials(key_id=row["key_id"], secret_hash=row["secret_hash"])
                                    .filter(grove_id=OuterRef("pk"))))
    at = datetime.fromisoformat(row["at"])
    liveness = {"last_heartbeat_at": at, "version": row["version"], "stale_since": None,
                "mesh_address": row["mesh_address"], "mesh_proxy_port": row["mesh_proxy_port"]}
    if row["log_tail"] is not None:
        liveness["log_tail"] = row["log_tail"]
    if grove.filter(free_digest=row["free"]).update(**liveness):
        return False
    with transaction.atomic():
        moved = grove.exclude(free_digest=row["free"]).update(
            **liveness, capacity=row["capacity"], free_digest=row["free"], capacity_reported_at=at)
        for unit in row["units"] if moved else ():
            PlacementUnit.objects.filter(grove_id=row["grove"], unit_id=unit["unit_id"]).update(
                cpu_milli_free=unit["cpu"], memory_bytes_free=unit["memory"], accelerators=unit["accelerators"])
    return True if moved else None


def heartbeat_fast_row(*, grove_id, presented: str, body) -> dict | None:
    """The statement's row for a wire heartbeat, or None when it cannot take the fast path (not a
    Grove credential, or a body that does not validate: the full path answers those with their codes)."""
    parts = secrets.split(presented, secrets.CREDENTIAL_PREFIX)
    if parts is None:
        return None
    try:
        data = rules.heartbeat(body, substrate=None, mesh=mesh_policy())
    except ValidationFailed:
        return None
    return heartbeat_row(grove_id=grove_id, data=data, now=timezone.now(), credential=parts)


def grove_heartbeat_unchanged(*, grove_id, presented: str, body: dict) -> bool:
    """The hot path in one statement: authenticate and record a heartbeat whose shape is unchanged.

    ``heartbeat_sql()``, guarded by a live credential of *this* Grove with this secret and by the stored
    shape digest: liveness only when the free counts are unchanged, else liveness plus the free counts.
    False means "take the full path" (authenticate with error codes, validate for the substrate, rewrite
    capacity): anything unusual — a bad body, an unknown or revoked credential, another Grove's
    credential, a changed shape — lands there, so behaviour is unchanged. The lean ASGI route
    (apps/dispatch/api/lean.py) runs the same statement on its async pool.
    """
    row = heartbeat_fast_row(grove_id=grove_id, presented=presented, body=body)
    return row is not None and row["grove"] in heartbeat_rows_run([row])


def grove_heartbeat_record(*, grove: Grove, body: dict) -> Grove:
    """Validate a heartbeat fully, then write it.

    An unchanged shape is one statement (``heartbeat_sql()``: liveness, plus the free counts when they
    moved); units, inventory, indexed capabilities and a history row are rewritten only when the shape
    changes.
    """
    data = rules.heartbeat(body, substrate=grove.substrate, mesh=mesh_policy())
    _mesh_claim(grove, data)
    shape, free = rules.capacity_digests(data["capacity"], data["change_kinds"], data["isolation"])
    now = timezone.now()
    liveness = _liveness_fields(data, now)
    if shape == grove.capacity_digest:
        row = heartbeat_row(grove_id=grove.pk, data=data, now=now, credential=None)
        if row["grove"] in heartbeat_rows_run([row]):
            for key, value in liveness.items():
                setattr(grove, key, value)
            if free != grove.free_digest:
                grove.capacity, grove.free_digest, grove.capacity_reported_at = data["capacity"], free, now
            return grove
    with transaction.atomic():
        grove = Grove.objects.select_for_update().get(pk=grove.pk)
        for key, value in liveness.items():
            setattr(grove, key, value)
        grove.change_kinds = data["change_kinds"]
        grove.isolation_modes = data["isolation"]
        grove.capacity = data["capacity"]
        grove.capacity_digest, grove.free_digest = shape, free
        grove.capacity_reported_at = now
        grove.save()
        _capacity_replace(grove, data["capacity"])
        grove_capabilities_sync(grove=grove)
        CapacityReport.objects.create(grove=grove, received_at=now, version=data["version"], digest=shape,
                                      capacity=data["capacity"])
        keep = list(CapacityReport.objects.filter(grove=grove).values_list("pk", flat=True)
                    [: settings.GROVE_REPORT_HISTORY])
        CapacityReport.objects.filter(grove=grove).exclude(pk__in=keep).delete()
        transaction.on_commit(lambda: hooks.capacity_moved([grove.pk]))
    return grove


def grove_stale_mark() -> int:
    """Record when quiet Groves went stale (beat task). Idempotent: marks each only once."""
    cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
    quiet = Grove.objects.filter(stale_since__isnull=True).exclude(last_heartbeat_at__gte=cutoff)
    slugs = list(quiet.values_list("slug", flat=True)[:1000])
    count = Grove.objects.filter(slug__in=slugs, stale_since__isnull=True).update(stale_since=timezone.now())
    for slug in slugs:
        log.warning("grove went stale", extra={"grove": slug})
    return count


def poll_stamp_due(grove: Grove, *, now: datetime | None = None) -> bool:
    """Whether a poll or claim by this Grove (its row as just authenticated) should write ``last_polled_at``:
    never stamped, or stamped more than ``GROVE_POLL_STAMP_S`` ago. Free: it reads the row in hand."""
    stamped = grove.last_polled_at
    now = now or timezone.now()
    return stamped is None or now - stamped >= timedelta(seconds=settings.GROVE_POLL_STAMP_S)


def grove_poll_record(*, grove: Grove, now: datetime | None = None) -> bool:
    """Readiness (docs/decisions.md "Grove readiness"): the Grove polled ``changes`` or claimed a job. Written
    coarsely, one guarded UPDATE at most every ``GROVE_POLL_STAMP_S`` per Grove, so a long-polling fleet adds
    few writes; a stamp after a silence longer than the liveness touch window (or the first) also moves
    ``updated_at`` (groves migration 0005), so the fleet snapshot learns the Grove became ready at its
    next refresh. Returns whether it wrote."""
    now = now or timezone.now()
    if not poll_stamp_due(grove, now=now):
        return False
    due = now - timedelta(seconds=settings.GROVE_POLL_STAMP_S)
    written = Grove.objects.filter(pk=grove.pk).filter(
        models.Q(last_polled_at__isnull=True) | models.Q(last_polled_at__lte=due)).update(last_polled_at=now)
    grove.last_polled_at = now
    return bool(written)
