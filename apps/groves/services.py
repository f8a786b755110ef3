"""Writes for Groves: enrollment tokens, enrollment, heartbeats, credentials, staleness."""
from __future__ import annotations

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.text import slugify

from apps.core.errors import Forbidden, Gone, NotAuthenticated, ValidationFailed
from apps.groves import hooks, rules, secrets
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
                 slug: str = "", version: str = "") -> Grove:
    """Create a Grove directly (enrollment, demo data, tests); platforms are validated and normalised."""
    grove = Grove.objects.create(
        slug=slug or _unique_slug(name), name=name, substrate=substrate, roles=roles,
        platforms=rules.platforms(platforms), version=version,
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
    if token is None or not secrets.matches(parts[1], token.secret_hash):
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


def grove_authenticate(*, presented: str) -> GroveCredential:
    """The live credential for a bearer value, with its Grove; raises 401 with a code otherwise."""
    parts = secrets.split(presented, secrets.CREDENTIAL_PREFIX)
    credential = None
    if parts:
        # The reported capacity and log tail can be large and no wire view needs them from here.
        credential = (GroveCredential.objects.select_related("grove").defer("grove__capacity", "grove__log_tail")
                      .filter(key_id=parts[0]).first())
    if credential is None or not secrets.matches(parts[1], credential.secret_hash):
        raise NotAuthenticated("credential_unknown", "This Grove credential is not known to Host.")
    if credential.revoked_at is not None:
        raise NotAuthenticated("credential_revoked", "This Grove credential was revoked; enroll again.")
    return credential


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
    fields = {"last_heartbeat_at": now, "version": data["version"], "stale_since": None}
    if data["log_tail"]:
        fields["log_tail"] = data["log_tail"][-settings.GROVE_LOG_TAIL_LINES:]
    return fields


# One statement records a heartbeat whose shape is unchanged, authenticating it when a credential is
# given: `live` when the free counts are unchanged too (liveness columns only, none indexed: a HOT
# update), `moved` when only free counts changed (the capacity JSON, the free digest and each unit's free
# columns). Their conditions exclude each other, so at most one writes the row. The result is the number
# of Grove rows written: 0 sends the caller to the full path.
HEARTBEAT_SQL = """
WITH live AS (
    UPDATE groves_grove SET last_heartbeat_at = %(now)s, version = %(version)s, stale_since = NULL,
                            log_tail = COALESCE(%(log_tail)s::jsonb, log_tail)
    WHERE id = %(grove)s::uuid AND capacity_digest = %(shape)s AND free_digest = %(free)s AND (
        %(key_id)s::text IS NULL OR EXISTS (SELECT 1 FROM groves_grovecredential WHERE grove_id = %(grove)s::uuid
            AND key_id = %(key_id)s AND secret_hash = %(secret_hash)s AND revoked_at IS NULL))
    RETURNING 1
), moved AS (
    UPDATE groves_grove SET last_heartbeat_at = %(now)s, version = %(version)s, stale_since = NULL,
                            log_tail = COALESCE(%(log_tail)s::jsonb, log_tail), capacity = %(capacity)s::jsonb,
                            free_digest = %(free)s, capacity_reported_at = %(now)s
    WHERE id = %(grove)s::uuid AND capacity_digest = %(shape)s AND free_digest <> %(free)s AND (
        %(key_id)s::text IS NULL OR EXISTS (SELECT 1 FROM groves_grovecredential WHERE grove_id = %(grove)s::uuid
            AND key_id = %(key_id)s AND secret_hash = %(secret_hash)s AND revoked_at IS NULL))
    RETURNING id
), units AS (
    UPDATE groves_placementunit u SET cpu_milli_free = f.cpu, memory_bytes_free = f.memory,
                                      accelerators = f.accelerators
    FROM jsonb_to_recordset(%(units)s::jsonb) AS f(unit_id text, cpu bigint, memory bigint, accelerators jsonb)
    WHERE u.grove_id IN (SELECT id FROM moved) AND u.unit_id = f.unit_id
    RETURNING 1
)
SELECT (SELECT count(*) FROM live) + (SELECT count(*) FROM moved), (SELECT count(*) FROM moved)
"""


def heartbeat_statement_params(*, grove_id, data: dict, now, credential: tuple[str, str] | None) -> dict:
    """Parameters of ``HEARTBEAT_SQL`` for a validated heartbeat (``credential``: key id and secret to check,
    None when the caller has already authenticated the Grove)."""
    shape, free = rules.capacity_digests(data["capacity"], data["change_kinds"], data["isolation"])
    tail = data["log_tail"][-settings.GROVE_LOG_TAIL_LINES:] if data["log_tail"] else None
    units = [{"unit_id": u["id"], "cpu": u["cpu_milli"]["free"], "memory": u["memory_bytes"]["free"],
              "accelerators": u["accelerators"]} for u in data["capacity"]["placement_units"]]
    return {"grove": str(grove_id), "key_id": credential[0] if credential else None,
            "secret_hash": secrets.hash_secret(credential[1]) if credential else None, "now": now,
            "version": data["version"], "log_tail": None if tail is None else json.dumps(tail), "shape": shape,
            "free": free, "capacity": json.dumps(data["capacity"]), "units": json.dumps(units)}


def heartbeat_statement_run(params: dict) -> bool:
    """Run ``HEARTBEAT_SQL`` (PostgreSQL), or the same guarded writes through the ORM on the embedded
    SQLite of ``make run``; True when the Grove row was written."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(HEARTBEAT_SQL, params)
            written, moved = cursor.fetchone()
        if moved:
            transaction.on_commit(lambda: hooks.capacity_moved(params["grove"]))
        return written == 1
    grove = Grove.objects.filter(pk=params["grove"], capacity_digest=params["shape"])
    if params["key_id"] is not None:
        grove = grove.filter(Exists(GroveCredential.objects.filter(
            grove_id=OuterRef("pk"), key_id=params["key_id"], secret_hash=params["secret_hash"],
            revoked_at__isnull=True)))
    liveness = {"last_heartbeat_at": params["now"], "version": params["version"], "stale_since": None}
    if params["log_tail"] is not None:
        liveness["log_tail"] = json.loads(params["log_tail"])
    if grove.filter(free_digest=params["free"]).update(**liveness):
        return True
    with transaction.atomic():
        moved = grove.exclude(free_digest=params["free"]).update(
            **liveness, capacity=json.loads(params["capacity"]), free_digest=params["free"],
            capacity_reported_at=params["now"])
        for unit in json.loads(params["units"]) if moved else ():
            PlacementUnit.objects.filter(grove_id=params["grove"], unit_id=unit["unit_id"]).update(
                cpu_milli_free=unit["cpu"], memory_bytes_free=unit["memory"], accelerators=unit["accelerators"])
    if moved:
        transaction.on_commit(lambda: hooks.capacity_moved(params["grove"]))
    return moved == 1


def heartbeat_fast_params(*, grove_id, presented: str, body) -> dict | None:
    """The statement's parameters for a wire heartbeat, or None when it cannot take the fast path (not a
    Grove credential, or a body that does not validate: the full path answers those with their codes)."""
    parts = secrets.split(presented, secrets.CREDENTIAL_PREFIX)
    if parts is None:
        return None
    try:
        data = rules.heartbeat(body, substrate=None)
    except ValidationFailed:
        return None
    return heartbeat_statement_params(grove_id=grove_id, data=data, now=timezone.now(), credential=parts)


def grove_heartbeat_unchanged(*, grove_id, presented: str, body: dict) -> bool:
    """The hot path in one statement: authenticate and record a heartbeat whose shape is unchanged.

    ``HEARTBEAT_SQL``, guarded by a live credential of *this* Grove with this secret and by the stored
    shape digest: liveness only when the free counts are unchanged, else liveness plus the free counts.
    False means "take the full path" (authenticate with error codes, validate for the substrate, rewrite
    capacity): anything unusual — a bad body, an unknown or revoked credential, another Grove's
    credential, a changed shape — lands there, so behaviour is unchanged. The lean ASGI route
    (apps/dispatch/api/lean.py) runs the same statement on its async pool.
    """
    params = heartbeat_fast_params(grove_id=grove_id, presented=presented, body=body)
    return params is not None and heartbeat_statement_run(params)


def grove_heartbeat_record(*, grove: Grove, body: dict) -> Grove:
    """Validate a heartbeat fully, then write it.

    An unchanged shape is one statement (``HEARTBEAT_SQL``: liveness, plus the free counts when they
    moved); units, inventory, indexed capabilities and a history row are rewritten only when the shape
    changes.
    """
    data = rules.heartbeat(body, substrate=grove.substrate)
    shape, free = rules.capacity_digests(data["capacity"], data["change_kinds"], data["isolation"])
    now = timezone.now()
    liveness = _liveness_fields(data, now)
    if shape == grove.capacity_digest:
        written = heartbeat_statement_run(heartbeat_statement_params(grove_id=grove.pk, data=data, now=now,
                                                                     credential=None))
        if written:
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
        transaction.on_commit(lambda: hooks.capacity_moved(grove.pk))
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
