"""Writes for Groves: enrollment tokens, enrollment, heartbeats, credentials, staleness."""
from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from django.utils.text import slugify

from apps.core.errors import Forbidden, Gone, NotAuthenticated, ValidationFailed
from apps.groves import rules, secrets
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


def grove_heartbeat_unchanged(*, grove_id, presented: str, body: dict) -> bool:
    """The hot path in one statement: authenticate and record a heartbeat whose capacity is unchanged.

    A single UPDATE of the Grove row, guarded by a live credential of *this* Grove with this secret and
    by the stored capacity digest. False means "take the full path" (authenticate with error codes,
    validate for the substrate, rewrite capacity): anything unusual — a bad body, an unknown or revoked
    credential, another Grove's credential, changed capacity — lands there, so behaviour is unchanged.
    """
    parts = secrets.split(presented, secrets.CREDENTIAL_PREFIX)
    if parts is None:
        return False
    try:
        data = rules.heartbeat(body, substrate=None)
    except ValidationFailed:
        return False
    digest = rules.capacity_digest(data["capacity"], data["change_kinds"], data["isolation"])
    live_credential = GroveCredential.objects.filter(
        grove_id=OuterRef("pk"), key_id=parts[0], secret_hash=secrets.hash_secret(parts[1]), revoked_at__isnull=True)
    updated = (Grove.objects.filter(pk=grove_id, capacity_digest=digest).filter(Exists(live_credential))
               .update(**_liveness_fields(data, timezone.now())))
    return updated == 1


def grove_heartbeat_record(*, grove: Grove, body: dict) -> Grove:
    """Validate a heartbeat fully, then write it in one transaction.

    The common case (nothing but liveness changed) is a single UPDATE; units, inventory, indexed
    capabilities and a history row are rewritten only when the reported capacity changes.
    """
    data = rules.heartbeat(body, substrate=grove.substrate)
    digest = rules.capacity_digest(data["capacity"], data["change_kinds"], data["isolation"])
    now = timezone.now()
    liveness = _liveness_fields(data, now)
    if digest == grove.capacity_digest:
        # One autocommitted UPDATE: no transaction round trips on the hot path.
        Grove.objects.filter(pk=grove.pk).update(**liveness)
        for key, value in liveness.items():
            setattr(grove, key, value)
        return grove
    with transaction.atomic():
        grove = Grove.objects.select_for_update().get(pk=grove.pk)
        for key, value in liveness.items():
            setattr(grove, key, value)
        grove.change_kinds = data["change_kinds"]
        grove.isolation_modes = data["isolation"]
        grove.capacity = data["capacity"]
        grove.capacity_digest = digest
        grove.capacity_reported_at = now
        grove.save()
        _capacity_replace(grove, data["capacity"])
        grove_capabilities_sync(grove=grove)
        CapacityReport.objects.create(grove=grove, received_at=now, version=data["version"], digest=digest,
                                      capacity=data["capacity"])
        keep = list(CapacityReport.objects.filter(grove=grove).values_list("pk", flat=True)
                    [: settings.GROVE_REPORT_HISTORY])
        CapacityReport.objects.filter(grove=grove).exclude(pk__in=keep).delete()
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
