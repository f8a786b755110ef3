"""Writes for artifacts: verified CAS uploads (staff and Grove), OCI image inspection and import,
build outputs, the artifact-platform check under ``host.deploy.forest_compatibility``, and GC."""
from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, ProtectedError, QuerySet, When
from django.utils import timezone

from apps.accounts.selectors import team_for_write, user_team_slugs
from apps.artifacts import hooks, rules, selectors, vocabulary
from apps.artifacts.choices import CheckVerdict, PlatformStatus, StorageKind, UseRole
from apps.artifacts.digests import check_digest
from apps.artifacts.models import Artifact, ArtifactPlatformCheck, ArtifactUse
from apps.artifacts.oci import (
    ImageReference,
    Index,
    Manifest,
    parse_document,
    parse_reference,
    platform_from_config,
    resolve_index,
)
from apps.artifacts.registry import RegistryClient
from apps.artifacts.s3 import S3BlobStore, S3Settings, validate_prefix
from apps.artifacts.store import BlobStore, FilesystemBlobStore
from apps.core.db import sql_from_meta
from apps.core.errors import (
    Conflict,
    Forbidden,
    ForestError,
    NotAuthenticated,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    ValidationFailed,
)
from apps.core.platforms import PlatformError, normalise_platform
from apps.flags.registry import FOREST_COMPATIBILITY
from apps.flags.selectors import is_enabled

log = logging.getLogger(__name__)

COMPATIBILITY_FLAG = FOREST_COMPATIBILITY
LOCK_CLASS = 0x4172  # pg_advisory_xact_lock(class, key) namespace for "a CAS digest becomes (in)visible"


# --- the store ---------------------------------------------------------------------------------------

def s3_settings() -> S3Settings:
    return S3Settings(bucket=settings.FOREST_CAS_S3_BUCKET, region=settings.FOREST_CAS_S3_REGION,
                      endpoint_url=settings.FOREST_CAS_S3_ENDPOINT_URL or None,
                      prefix=validate_prefix(settings.FOREST_CAS_S3_PREFIX),
                      access_key_id=settings.FOREST_CAS_S3_ACCESS_KEY_ID or None,
                      secret_access_key=settings.FOREST_CAS_S3_SECRET_ACCESS_KEY or None,
                      timeout_s=settings.FOREST_CAS_S3_TIMEOUT_S)


@lru_cache(maxsize=8)
def _s3_store(config: S3Settings) -> S3BlobStore:
    return S3BlobStore(config)  # one boto3 client per configuration per process (clients are thread-safe)


def blob_store() -> BlobStore:
    """The configured backend: ``FOREST_CAS_BACKEND`` = ``filesystem`` (the embedded default, under
    ``FOREST_CAS_ROOT``) or ``s3`` (``FOREST_CAS_S3_*``)."""
    backend = settings.FOREST_CAS_BACKEND
    if backend == "filesystem":
        return FilesystemBlobStore(settings.FOREST_CAS_ROOT)
    if backend == "s3":
        return _s3_store(s3_settings())
    raise ServiceUnavailable("cas_misconfigured", f"FOREST_CAS_BACKEND is '{backend}'; use 'filesystem' or 's3'.")


def _digest_lock(digest: str) -> None:
    """Serialise "this digest becomes visible" (upload commit) with "this digest goes away" (GC) across
    every Host process. PostgreSQL only; the embedded SQLite default is a single process."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [LOCK_CLASS, int(digest[7:15], 16) - 2**31])


# --- kinds ---------------------------------------------------------------------------------------------

_KIND_CODES = {StorageKind.OCI_REGISTRY: "artifact_not_oci_image", StorageKind.CAS: "artifact_not_cas_blob",
               StorageKind.NPM_REGISTRY: "artifact_not_npm_package", StorageKind.EVIDENCE: "artifact_not_evidence"}


def require_storage_kind(artifact: Artifact, *, kind: str, field: str = "artifact") -> Artifact:
    """The artifact, if its bytes live where the consumer needs them; else a coded refusal."""
    if artifact.storage_kind != kind:
        raise ValidationFailed(
            _KIND_CODES[kind],
            f"{artifact.digest} is a {artifact.get_storage_kind_display()} artifact ({artifact.reference}), "
            f"not a {StorageKind(kind).label} one.", field=field,
            extra={"storage_kind": artifact.storage_kind, "required_kind": kind})
    return artifact


def require_oci_image(artifact: Artifact, *, field: str = "artifact") -> Artifact:
    """A consumer that needs an image reference: a CAS blob digest is never a container."""
    return require_storage_kind(artifact, kind=StorageKind.OCI_REGISTRY, field=field)


def require_cas_blob(artifact: Artifact, *, field: str = "artifact") -> Artifact:
    return require_storage_kind(artifact, kind=StorageKind.CAS, field=field)


# --- CAS writes ------------------------------------------------------------------------------------------

KEY_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/+-]{0,99}$")


def _check_signature(signature: str, signing_key_id: str) -> None:
    if signing_key_id and not KEY_ID_RE.match(signing_key_id):
        raise ValidationFailed("invalid_key_id", "A key id is 1 to 100 letters, digits and '._:@/+-'.",
                               field="key_id")
    if not signature:
        return
    try:
        if len(signature) > 100 or len(base64.b64decode(signature, validate=True)) != 64:
            raise ValueError
    except (binascii.Error, ValueError):
        raise ValidationFailed("invalid_signature", "A signature is a base64 Ed25519 signature (64 bytes).",
                               field="signature") from None
    if not signing_key_id:
        raise ValidationFailed("field_required", "A signature needs the id of the key that made it.", field="key_id")


def _declared_platform(platform: str) -> str:
    if not platform:
        return ""
    try:
        return normalise_platform(platform)
    except PlatformError as exc:
        raise ValidationFailed("invalid_platform", str(exc), field="platform") from None


# Set once, never changed: a later upload may fill one that is empty, never rewrite one that is set.
_SET_ONCE = (("signature", "signature"), ("signing_key_id", "key_id"), ("media_type", "media_type"),
             ("platform", "platform"))


def _settle(existing: Artifact, offered: dict[str, str]) -> list[str]:
    """The set-once fields an upload of ``existing``'s location may fill (their names), or ``409
    artifact_immutable`` when it offers a different value for one already set. Nothing is written here."""
    filled = []
    for name, field_name in _SET_ONCE:
        value, held = offered.get(name, ""), getattr(existing, name)
        if not value or value == held:
            continue
        if held:
            raise Conflict("artifact_immutable", f"This artifact's {field_name} is already set and never changes; "
                           "upload under another reference (or team) to record a different one.", field=field_name)
        setattr(existing, name, value)
        filled.append(name)
    if "platform" in filled:
        existing.platform_status, existing.platform_source = vocabulary.PlatformStatus.KNOWN, "declared"
        filled += ["platform_status", "platform_source"]
    return filled


def artifact_blob_create(*, chunks: Iterable[bytes], expected_digest: str | None = None, media_type: str = "",
                         signature: str = "", signing_key_id: str = "", platform: str = "",
                         reference: str | None = None, producing_run_id: str = "", producing_node: str = "",
                         producing_name: str = "", team: str = "", uploaded_by=None,
                         expected_size: int | None = None) -> Artifact:
    """Stream bytes into the CAS, verified against ``expected_digest`` when given, and record them as
    ``team``'s artifact.

    Everything checkable is checked before a byte is read (media type, signature shape, platform, the
    store itself: a missing bucket is ``503 cas_bucket_missing``). A mismatch or an oversized stream leaves
    nothing behind. The blob becomes visible and its row is written under the digest's lock, so GC never
    removes a blob an upload has just recorded. ``reference`` (default: the digest) names an object
    key; one key names one digest for ever (``blob_key_exists``).

    Ownership never moves (docs/permissions.md "Artifact ownership"): bytes another team already stored
    give ``team`` its own row, and nothing of the other's (id, time, signature) is read into the answer.
    A repeat upload by the same team returns its row, filling only set-once fields still empty; a
    different signature, key id, media type or platform for one already set is ``409 artifact_immutable``.
    """
    if expected_digest is not None:
        check_digest(expected_digest)
    media_type = rules.media_type_check(media_type)
    _check_signature(signature, signing_key_id)
    declared = _declared_platform(platform)
    if reference is not None and expected_digest is not None:
        _check_key_free(reference, expected_digest)
    store = blob_store()
    store.check()
    if expected_size is not None and expected_size > settings.FOREST_MAX_BLOB_BYTES:
        raise PayloadTooLarge("blob_too_large", f"The blob ({expected_size} bytes) exceeds the limit of "
                              f"{settings.FOREST_MAX_BLOB_BYTES} bytes.")
    staged = store.stage(chunks, expected_digest=expected_digest, max_bytes=settings.FOREST_MAX_BLOB_BYTES,
                         expected_size=expected_size)
    offered = {"media_type": media_type, "signature": signature, "signing_key_id": signing_key_id,
               "platform": declared}
    try:
        with transaction.atomic():
            _digest_lock(staged.digest)
            if reference is not None:
                _check_key_free(reference, staged.digest)
            location = {"digest": staged.digest, "storage_kind": StorageKind.CAS,
                        "reference": reference or staged.digest, "team": team}
            artifact = Artifact.objects.select_for_update().filter(**location).first()
            filled = _settle(artifact, offered) if artifact is not None else []
            store.commit(staged)
            if artifact is None:
                artifact = Artifact.objects.create(
                    **location, media_type=media_type, size=staged.size, signature=signature,
                    signing_key_id=signing_key_id, platform=declared,
                    platform_status=PlatformStatus.KNOWN if declared else PlatformStatus.NOT_APPLICABLE,
                    platform_source="declared" if declared else "", producing_run_id=producing_run_id,
                    producing_node=producing_node, producing_name=producing_name,
                    uploaded_by=uploaded_by if getattr(uploaded_by, "pk", None) else None)
            elif filled:
                artifact.save(update_fields=filled)
    except BaseException:
        store.discard(staged)
        raise
    log.info("cas blob stored", extra={"digest": artifact.digest, "size": artifact.size, "backend": store.kind,
                                       "reference": artifact.reference, "team": artifact.team})
    return artifact


def _check_key_free(reference: str, digest: str) -> None:
    taken = (Artifact.objects.filter(storage_kind=StorageKind.CAS, reference=reference).exclude(digest=digest)
             .values_list("digest", flat=True).first())
    if taken:
        raise Conflict("blob_key_exists", f"'{reference}' already holds {taken}; object keys are write-once.",
                       field="key")


def grove_blob_write(*, grove, run_id: str, node_id: str, key: str, chunks: Iterable[bytes],
                     expected_digest: str | None, media_type: str = "", expected_size: int | None = None,
                     job_id: str | None = None) -> Artifact:
    """A Grove writes an output of its own run's node, under ``runs/<run>/<node>/<key>``. Refused
    (before a byte is read) unless the Grove holds that node's live job, or the key leaves the prefix."""
    run_id = rules.canonical_run_id(run_id)
    reference = rules.run_object_key(run_id=run_id, node_id=node_id, key=key)
    rules.media_type_check(media_type)
    if job_id is not None:
        data_token_job_check(grove=grove, job_id=job_id)
    team = hooks.grove_write_scope(grove.pk, run_id, node_id)
    if team is None:
        raise Forbidden("blob_write_out_of_scope",
                        f"This Grove holds no live job for node '{node_id}' of run {run_id}; it may write only "
                        f"its own running work's outputs.")
    artifact = artifact_blob_create(chunks=chunks, expected_digest=expected_digest, media_type=media_type,
                                    reference=reference, producing_run_id=run_id, producing_node=node_id,
                                    producing_name=key, team=team, expected_size=expected_size)
    # A repeated upload of the same bytes finds the same artifact and the same lineage row.
    ArtifactUse.objects.get_or_create(run_id=run_id, node=node_id, role=UseRole.OUTPUT, name=key,
                                      defaults={"artifact": artifact, "team": team})
    return artifact


# --- CAS reads (scoped) ------------------------------------------------------------------------------

def artifact_cas_get(*, digest: str, user=None) -> Artifact:
    """The CAS artifact for ``digest`` that ``user`` may read (``selectors.readable``; none: Host's own
    reads) whose bytes are present — the reader's own row, so its media type is the one served — or
    ``404 artifact_not_found``, the same answer whether the bytes are absent or another team's."""
    rows = selectors.readable(Artifact.objects.filter(digest=check_digest(digest), storage_kind=StorageKind.CAS),
                              user)
    artifact = rows.order_by("created_at", "id").first()
    if artifact is None or not blob_store().exists(digest):
        raise NotFound("artifact_not_found", f"No blob {digest} that your teams may read.")
    return artifact


def artifact_cas_for_reference(*, digest: str) -> Artifact | None:
    """For a writer about to reference a CAS blob (a workload's bundle), inside its transaction: the
    artifact, row-locked ``FOR SHARE`` until that transaction ends, so GC (which locks ``FOR UPDATE``)
    waits and then sees the new reference — a blob referenced during GC survives it."""
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""  # SQLite: one writer at a time anyway
    rows = list(Artifact.objects.raw(sql_from_meta(
        "SELECT * FROM {a} WHERE {a.digest} = %s AND {a.storage_kind} = %s ORDER BY {a.created_at}, {a.id}",
        a=Artifact) + lock, [digest, StorageKind.CAS]))
    return rows[0] if rows else None


def grove_blob_read(*, grove, digest: str, job_id: str | None = None) -> Artifact:
    """A Grove may download a blob only while work assigned to it references it (hooks: its workload
    generations' bundles, its live jobs' inputs); otherwise ``403 blob_out_of_scope``, no bytes. Through a
    job data token (``job_id``) only while that job itself is live: the token dies with its job
    (``401 data_token_job_ended``), whatever else the Grove still runs."""
    check_digest(digest)
    if job_id is not None:
        data_token_job_check(grove=grove, job_id=job_id)
    if not hooks.grove_may_read(grove.pk, digest):
        raise Forbidden("blob_out_of_scope",
                        f"No work assigned to Grove {grove.slug} references {digest}.")
    return artifact_cas_get(digest=digest)


def data_token_job_check(*, grove, job_id: str) -> None:
    """``401 data_token_job_ended`` unless the data token's job is live on ``grove`` (hooks: dispatch's jobs,
    told through pipelines), so a token never outlives the job it was issued for."""
    if not hooks.job_is_live(grove.pk, job_id):
        raise NotAuthenticated("data_token_job_ended", f"Job {job_id} has ended; its data token ended with it.")


# --- OCI images ----------------------------------------------------------------------------------------

def registry_client() -> RegistryClient:
    """A client for one import (its deadline is the import's), aimed only where the egress rules allow."""
    return RegistryClient(timeout_s=settings.FOREST_OCI_TIMEOUT_S,
                          insecure_registries=frozenset(settings.FOREST_OCI_INSECURE_REGISTRIES),
                          private_registries=frozenset(settings.FOREST_OCI_PRIVATE_REGISTRIES),
                          own_services=settings.FOREST_OWN_SERVICE_URLS)


@dataclass
class ImageFacts:
    """What Host read about one image manifest: its digest, size, media type and config platform, and,
    when it was chosen from an index, that index and how."""

    ref: ImageReference
    digest: str
    size: int | None
    media_type: str
    platform: str
    platform_source: str
    index_digest: str = ""
    matched: str = ""
    offered: list = field(default_factory=list)

    @property
    def platform_status(self) -> str:
        return PlatformStatus.KNOWN if self.platform else PlatformStatus.UNKNOWN


def _config_platform(client: RegistryClient, ref: ImageReference, manifest: Manifest) -> tuple[str, str]:
    """(platform, source) from the image config; an unreadable config is unknown, never guessed."""
    try:
        platform = platform_from_config(client.blob(ref, manifest.config.digest))
    except ForestError as exc:
        if exc.code == "registry_unreachable":
            raise
        return "", f"config_unreadable:{exc.code}"
    return (str(platform), "config") if platform else ("", "config_unreadable:no_platform")


def oci_image_inspect(*, reference: str, platforms: list, fallback: list | None = None,
                      client: RegistryClient | None = None) -> ImageFacts:
    """Read an image from its registry: manifest → config → platform. An index / manifest list is
    resolved for ``platforms`` in their order (``oci.resolve_index``), then the chosen child is read.
    Raises coded errors (``invalid_image_reference``, ``image_not_found``, ``registry_unreachable``,
    ``manifest_malformed``, ``no_matching_platform``, ...); records nothing."""
    ref = parse_reference(reference)
    client = client or registry_client()
    top = client.manifest(ref)
    document = parse_document(top.data, top.media_type)
    index_digest, matched, offered = "", "", []
    if isinstance(document, Index):
        resolution = resolve_index(document, grove_platforms=platforms,
                                   fallback=settings.FOREST_OCI_FALLBACK_PLATFORMS if fallback is None else fallback)
        index_digest, matched, offered = top.digest, resolution.matched, resolution.offered
        child = client.manifest(ref, resolution.descriptor.digest)
        document = parse_document(child.data, resolution.descriptor.media_type)
        if not isinstance(document, Manifest):
            raise ValidationFailed("manifest_malformed", f"Index entry {child.digest} is not an image manifest.",
                                   field="manifest")
        top = child
    platform, source = _config_platform(client, ref, document)
    if index_digest:
        source = f"index:{matched}" if platform else source
    return ImageFacts(ref=ref, digest=top.digest, size=len(top.data), media_type=document.media_type,
                      platform=platform, platform_source=source, index_digest=index_digest, matched=matched,
                      offered=offered)


def _record_image(facts: ImageFacts, *, team: str = "", producing_run_id: str = "",
                  producing_node: str = "") -> Artifact:
    """``team``'s row for an image manifest (created on first sight). Ownership never moves: another
    team's record of the same manifest is a row of its own. What the registry says is filled in where the
    row does not know it yet (an unknown platform, a missing producer); nothing set is rewritten."""
    artifact, created = Artifact.objects.get_or_create(
        digest=facts.digest, storage_kind=StorageKind.OCI_REGISTRY, reference=facts.ref.pinned(facts.digest),
        team=team,
        defaults={"media_type": facts.media_type, "size": facts.size, "platform": facts.platform,
                  "platform_status": facts.platform_status, "platform_source": facts.platform_source,
                  "producing_run_id": producing_run_id, "producing_node": producing_node},
    )
    if created:
        return artifact
    changes: dict = {}
    if not artifact.platform and facts.platform:
        changes.update(platform=facts.platform, platform_status=facts.platform_status,
                       platform_source=facts.platform_source)
    if not artifact.producing_run_id and producing_run_id:
        changes.update(producing_run_id=producing_run_id, producing_node=producing_node)
    if changes:
        Artifact.objects.filter(pk=artifact.pk).update(**changes)
        for key, value in changes.items():
            setattr(artifact, key, value)
    return artifact


def oci_image_import(*, reference: str, grove) -> tuple[Artifact, ImageFacts, ArtifactPlatformCheck]:
    """Import an external image for a destination Grove: resolve an index against the Grove's reported
    platforms in its reported order (fallback when it reports none usable), record the chosen child's
    digest and platform, and check a single-platform image against the Grove under the flag."""
    facts = oci_image_inspect(reference=reference, platforms=list(grove.platforms or []))
    with transaction.atomic():
        artifact = _record_image(facts)
        check = artifact_platform_require(artifact=artifact, required=list(grove.platforms or []),
                                          subject_type="image_import", subject_id=str(facts.ref), grove=grove)
    return artifact, facts, check


# --- step inputs: resolved at submit -------------------------------------------------------------------

def _input_refusal(code: str, detail: str, field: str, **extra) -> ValidationFailed:
    return ValidationFailed(code, detail, field=field, extra=extra or None)


def _input_kind(artifact: Artifact, *, kind: str, field: str, why: str) -> None:
    """``require_oci_image`` / ``require_cas_blob``, answered as the input refusal ``input_kind_mismatch``."""
    checks = {StorageKind.OCI_REGISTRY: require_oci_image, StorageKind.CAS: require_cas_blob}
    try:
        if kind in checks:
            checks[kind](artifact, field=field)
        else:
            require_storage_kind(artifact, kind=kind, field=field)
    except ValidationFailed as exc:
        raise _input_refusal("input_kind_mismatch", f"{exc.detail} {why}", field,
                             storage_kind=artifact.storage_kind, required_kind=kind) from None


def _input_image(reference: str, *, platforms: list[str], field: str, team: str) -> Artifact:
    """An input named by image reference: read from its registry (an index resolved for ``platforms`` in
    their order) and recorded, so lineage can point at the exact manifest the step used."""
    try:
        facts = oci_image_inspect(reference=reference, platforms=platforms)
    except ForestError as exc:
        if exc.code == "no_matching_platform":
            raise _input_refusal("input_platform_unsupported", f"{reference}: {exc.detail}", field,
                                 offered=exc.extra.get("offered", []),
                                 grove_platforms=exc.extra.get("grove_platforms", platforms)) from None
        if exc.code in ("image_not_found", "invalid_image_reference"):
            raise _input_refusal("input_not_found", f"{reference}: {exc.detail}", field) from None
        raise
    return _record_image(facts, team=team)


def _input_artifact(item: dict, *, readable: QuerySet) -> Artifact | None:
    if item.get("artifact") is not None:
        rows = readable.filter(pk=item["artifact"])
    else:
        rows = readable.filter(digest=item["digest"])
        if item.get("storage_kind"):
            rows = rows.filter(storage_kind=item["storage_kind"])
        if item.get("ref"):
            rows = rows.filter(reference=item["ref"])
    # A digest may be both a blob and an image manifest: the blob is what a step is handed as a file.
    artifact = (rows.annotate(not_cas=Case(When(storage_kind=StorageKind.CAS, then=0), default=1))
                .order_by("not_cas", "created_at", "id").first())
    if artifact is not None and artifact.storage_kind == StorageKind.CAS:
        # Share-locked until the run's transaction ends: GC (which locks FOR UPDATE) then sees the node
        # that references it.
        artifact_cas_for_reference(digest=artifact.digest)
    return artifact


def artifact_input_resolve(*, item: dict, field: str, platforms: list[str], user=None, team: str = "") -> dict:
    """One step input (``{"artifact"|"digest"|"image", "kind"?, "path"?, "name"}``, as the node parser left
    it) resolved to the exact artifact the step will see: ``{"name", "artifact_id", "digest",
    "storage_kind", "reference", "size", "path"?}``. ``platforms`` are the chosen Grove's, in its order
    (or the step's own when it is not pinned). Refusals, each naming the input: ``input_not_found``
    (unknown, or not readable by the submitting user's teams, or its bytes are gone),
    ``input_kind_mismatch`` (an image where a file is delivered, or the declared kind differs),
    ``input_platform_unsupported`` (an index without, or an artifact built for none of, ``platforms``)."""
    if item.get("image"):
        artifact = _input_image(item["image"], platforms=platforms, field=field, team=team)
    else:
        artifact = _input_artifact(item, readable=selectors.readable(Artifact.objects.all(), user, team=team))
    what = item.get("image") or (f"artifact {item['artifact']}" if item.get("artifact") is not None
                                 else item.get("digest"))
    if artifact is None:
        raise _input_refusal("input_not_found", f"No artifact {what} that your teams may read.", field)
    declared = item.get("kind") or item.get("storage_kind")
    if declared:
        _input_kind(artifact, kind=declared, field=field, why=f"The input declares kind '{declared}'.")
    if item.get("path"):
        _input_kind(artifact, kind=StorageKind.CAS, field=field,
                    why="Only a content-addressed blob is delivered as a file at a path.")
    if artifact.storage_kind == StorageKind.CAS and not blob_store().exists(artifact.digest):
        raise _input_refusal("input_not_found", f"The bytes of {artifact.digest} are no longer stored.", field)
    if artifact.platform and platforms:
        fit = rules.platform_fit(artifact_platform=artifact.platform, required=platforms, what="the Grove")
        if fit.fits is False:
            raise _input_refusal("input_platform_unsupported", f"{what}: {fit.detail}.", field,
                                 offered=[artifact.platform], grove_platforms=list(platforms))
    resolved = {"name": item["name"], "artifact_id": artifact.pk, "digest": artifact.digest,
                "storage_kind": artifact.storage_kind, "reference": artifact.reference, "size": artifact.size}
    if item.get("path"):
        resolved["path"] = item["path"]
    return resolved


def upload_team(user, requested: str | None) -> str:
    """The team an upload belongs to: the one named (the user must be in it), else the user's only team,
    else none (a shared, team-less artifact)."""
    if requested:
        return team_for_write(user, requested)
    teams = list(user_team_slugs(user)) if getattr(user, "pk", None) else []
    return teams[0] if len(teams) == 1 else ""


def artifact_uses_record(*, run_id, node: str, role: str, uses: list[tuple[int, str]], team: str = "") -> None:
    """Lineage rows for one node: ``uses`` is ``[(artifact id, name)]``; a repeat is a no-op."""
    ArtifactUse.objects.bulk_create(
        [ArtifactUse(artifact_id=artifact_id, run_id=run_id, node=node, role=role, name=name, team=team)
         for artifact_id, name in uses], ignore_conflicts=True)


# --- the artifact-platform check -----------------------------------------------------------------------

def artifact_platform_check(*, artifact: Artifact, required: list[str], subject_type: str, subject_id: str,
                            grove=None, environment: str | None = None, team: str | None = None,
                            code: str = "artifact_platform_mismatch", mismatch: str = "") -> ArtifactPlatformCheck:
    """Record whether ``artifact`` can run on one of ``required``. A mismatch is ``refused`` with
    ``host.deploy.forest_compatibility`` on, ``would_refuse`` (logged) with it off; an unknown
    platform is never a mismatch (``mismatch`` states one found otherwise: an index without the target).
    The caller decides what a refusal stops."""
    fit = rules.PlatformFit(False, mismatch) if mismatch else rules.platform_fit(
        artifact_platform=artifact.platform, required=required,
        what=f"Grove {grove.slug}" if grove is not None else "the target")
    enforced = is_enabled(COMPATIBILITY_FLAG, environment=environment or None, team=team or None)
    if fit.fits is False:
        verdict = CheckVerdict.REFUSED if enforced else CheckVerdict.WOULD_REFUSE
    else:
        verdict = CheckVerdict.OK if fit.fits else CheckVerdict.PLATFORM_UNKNOWN
    check = ArtifactPlatformCheck.objects.create(
        artifact=artifact, subject_type=subject_type, subject_id=subject_id, grove=grove, required=list(required),
        artifact_platform=artifact.platform, verdict=verdict, enforced=enforced,
        code=code if fit.fits is False else "", detail=fit.detail[:2000])
    if fit.fits is False:
        log.warning("artifact platform %s", "refused" if enforced else "would refuse (flag off)",
                    extra={"subject": f"{subject_type}:{subject_id}", "artifact": artifact.digest,
                           "detail": fit.detail})
    return check


def artifact_platform_require(**kwargs) -> ArtifactPlatformCheck:
    """``artifact_platform_check`` that raises ``409 artifact_platform_mismatch`` when it refuses."""
    check = artifact_platform_check(**kwargs)
    if check.verdict == CheckVerdict.REFUSED:
        raise Conflict(check.code, f"Refused ({COMPATIBILITY_FLAG} is on): {check.detail}.", field="platform",
                       extra={"artifact": check.artifact.digest, "artifact_platform": check.artifact_platform,
                              "required": check.required})
    return check


def build_image_output_record(*, outputs: dict, run_id: str, node_id: str, target_platforms: list[str],
                              environment: str | None = None, team: str | None = None,
                              client: RegistryClient | None = None) -> ArtifactPlatformCheck | None:
    """A succeeded ``build_image`` node's pushed image (``outputs["image"]``, pinned by digest): read its
    manifest and config from the registry, record it as an ``oci_registry`` artifact produced by the
    run's node, and check its platform against the node's target. Returns the check (the caller fails
    the node when it is ``refused``), or None when there is no pinned image to record.

    Never raises for what the Grove or the registry got wrong: the job already succeeded. An unreadable
    config or an unreachable registry records the image with its platform *unknown* (the reason in
    ``platform_source``); unknown is never a mismatch and never guessed. A multi-platform push is
    resolved for the target; one that lacks the target is a mismatch."""
    image = outputs.get("image") if isinstance(outputs, dict) else None
    try:
        ref = parse_reference(image, field="outputs.image") if image else None
    except ForestError:
        ref = None
    if ref is None or not ref.digest:
        log.warning("build_image output has no image pinned by digest; nothing recorded",
                    extra={"run": run_id, "node": node_id, "image": str(image)[:200]})
        return None
    subject = {"subject_type": "build_image", "subject_id": f"{run_id}:{node_id}", "environment": environment,
               "team": team}
    try:
        facts = oci_image_inspect(reference=image, platforms=target_platforms, fallback=[], client=client)
    except ForestError as exc:
        log.warning("build_image output platform unknown", extra={"image": image, "code": exc.code})
        facts = ImageFacts(ref=ref, digest=ref.digest, size=None, media_type="", platform="",
                           platform_source=f"unreadable:{exc.code}")
        if exc.code == "no_matching_platform" and target_platforms:
            artifact = _record_image(facts, team=team or "", producing_run_id=run_id, producing_node=node_id)
            return artifact_platform_check(artifact=artifact, required=target_platforms, mismatch=exc.detail,
                                           **subject)
    artifact = _record_image(facts, team=team or "", producing_run_id=run_id, producing_node=node_id)
    return artifact_platform_check(artifact=artifact, required=target_platforms, **subject)


# --- garbage collection --------------------------------------------------------------------------------

def _retained(digests: set[str], *, cutoff: datetime) -> set[str]:
    """Digests GC must keep: recorded recently (inside the grace period), produced by a run (its
    outputs are the run's record), or referenced by work (the hooks: workloads, live jobs)."""
    rows = Artifact.objects.filter(digest__in=digests, storage_kind=StorageKind.CAS)
    keep = set(rows.filter(created_at__gte=cutoff).values_list("digest", flat=True))
    keep |= set(rows.exclude(producing_run_id="").values_list("digest", flat=True))
    # Lineage retention: anything a run used recently stays, so the run's record can still be fetched.
    used_after = timezone.now() - timedelta(seconds=settings.FOREST_LINEAGE_RETENTION_S)
    keep |= set(rows.filter(uses__created_at__gte=used_after).values_list("digest", flat=True))
    return keep | hooks.referenced(digests - keep)


def _collect(store: BlobStore, digest: str, *, cutoff: datetime) -> bool:
    """Remove one unreferenced blob: its rows under row locks after a re-check, then (under the digest
    lock, only if no row came back meanwhile) its bytes. True when the blob was removed."""
    try:
        with transaction.atomic():
            _digest_lock(digest)
            rows = list(Artifact.objects.select_for_update().filter(digest=digest, storage_kind=StorageKind.CAS))
            if _retained({digest}, cutoff=cutoff):
                return False
            Artifact.objects.filter(pk__in=[r.pk for r in rows]).delete()
    except ProtectedError:
        return False  # something references a row through a protected foreign key
    with transaction.atomic():
        _digest_lock(digest)
        if Artifact.objects.filter(digest=digest, storage_kind=StorageKind.CAS).exists():
            return False  # re-uploaded between the two steps: the new row owns the bytes
        store.delete(digest)
    return True


def artifact_gc(*, now: datetime | None = None, grace_s: float | None = None, dry_run: bool = False) -> dict:
    """Remove CAS blobs nothing references that are older than the grace period
    (``FOREST_CAS_GC_GRACE_S``), and staged uploads a crash left behind. Never a referenced blob: each
    removal re-checks under the blob's row locks, which referencing writers share-lock
    (``artifact_cas_for_reference``). A missing bucket is logged and skipped, never an error."""
    now = now or timezone.now()
    grace = settings.FOREST_CAS_GC_GRACE_S if grace_s is None else grace_s
    cutoff = now - timedelta(seconds=grace)
    report = {"backend": "", "examined": 0, "removed": 0, "kept": 0, "staging_removed": 0, "dry_run": dry_run,
              "skipped": ""}
    try:
        store = blob_store()
        report["backend"] = store.kind
        store.check()
        old = {blob.digest for blob in store.blobs() if blob.modified_at < cutoff}
    except ServiceUnavailable as exc:
        log.warning("artifact gc skipped: %s", exc.detail, extra={"code": exc.code})
        report["skipped"] = exc.code
        return report
    report["examined"] = len(old)
    candidates = old - _retained(old, cutoff=cutoff)
    report["kept"] = len(old) - len(candidates)
    if dry_run:
        report["removed"] = len(candidates)
        return report
    for digest in sorted(candidates):
        if _collect(store, digest, cutoff=cutoff):
            report["removed"] += 1
        else:
            report["kept"] += 1
    report["staging_removed"] = store.sweep_staging(before=cutoff)
    log.info("artifact gc", extra={k: v for k, v in report.items() if k != "skipped"})
    return report
