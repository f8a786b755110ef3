"""Writes for native workloads: desired state, the generation writer, and observed status."""
from __future__ import annotations

import logging
import uuid
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.artifacts.models import Artifact
from apps.artifacts.selectors import readable
from apps.artifacts.services import artifact_cas_for_reference, artifact_platform_require
from apps.artifacts.vocabulary import StorageKind
from apps.core.db import advisory_locks
from apps.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from apps.dispatch.wakeups import grove_wake
from apps.flags.selectors import is_enabled
from apps.groves.models import Grove
from apps.groves.vocabulary import ChangeKind
from apps.placement.derivation import requirement_for_native_workload
from apps.placement.selectors import grove_by_reference
from apps.placement.services import place_execution
from apps.placement.vocabulary import SubjectType
from apps.workloads import rules, secrets
from apps.workloads.models import IngressHostname, NativeWorkload, WorkloadGeneration, WorkloadSecret
from apps.workloads.selectors import workload_secret_values
from apps.workloads.states import GENERATION
from apps.workloads.vocabulary import NATIVE_INGRESS_FLAG, GenerationState

log = logging.getLogger(__name__)
# One placement per workload (subject id = its slug): every generation stays on the same Grove.
SUBJECT_TYPE = SubjectType.WORKLOAD_GENERATION
HOSTNAME_LOCK_CLASS = 0x486E  # pg_advisory_xact_lock(class, hashtext(name)): a host name (or slug) claimed
SECRET_LOCK_CLASS = 0x5365  # pg_advisory_xact_lock(class, hashtext(key)): one team's secret being written


@transaction.atomic
def workload_secret_set(*, team: str, environment: str, name: str, value: str) -> WorkloadSecret:
    """Create or replace ``team``'s secret ``name`` in ``environment`` (team "" : a team-less one, which only
    team-less workloads read). Another team's secret of the same name is neither touched nor consulted, so
    nothing in the answer depends on it. ``team`` is the caller's resolved team (``team_for_write``)."""
    if not rules.ENV_NAME_RE.match(name):
        raise ValidationFailed("invalid_env_name", f"Secret name '{name}' must be a valid variable name.", field="name")
    # Writers of one (team, environment, name) wait in line, so the later one finds the earlier one's row and
    # replaces its value rather than leaning on update_or_create's retry after a unique violation.
    advisory_locks(SECRET_LOCK_CLASS, [f"{team}\x1f{environment}\x1f{name}"])
    secret, _ = WorkloadSecret.objects.update_or_create(
        team=team, environment=environment, name=name, defaults={"ciphertext": secrets.encrypt(value)})
    return secret


def _secret_values(workload: NativeWorkload) -> dict[str, str]:
    """The workload's secrets, its own team's only (``selectors.workload_secret_values``)."""
    keys = [(workload.team, workload.environment, name) for name in workload.secret_refs]
    found = workload_secret_values(keys)
    missing = sorted(key[2] for key in keys if key not in found)
    if missing:
        owner = f"team '{workload.team}'" if workload.team else "team-less workloads"
        raise ValidationFailed("secret_missing", f"Secret '{missing[0]}' is not set for {owner} in environment "
                               f"'{workload.environment}'.", field="secret_refs")
    return {key[2]: value for key, value in found.items()}


def _bundle(digest: str, *, team: str) -> Artifact:
    """The workload's team's own row for the bundle (or a team-less one staff shared), through the one
    artifact selector: another team's bundle is not found, whoever applies (a staff admin too)."""
    artifact_cas_for_reference(digest=digest)  # share-locked: GC cannot remove it under us
    bundle = (readable(Artifact.objects.filter(digest=digest, storage_kind=StorageKind.CAS), team=team)
              .order_by("-team", "created_at", "id").first())  # the team's own row before a shared one
    if bundle is None:
        raise ValidationFailed("artifact_not_found", f"No bundle {digest} that team '{team or '(none)'}' may read.",
                               field="bundle_digest")
    if not bundle.signature:
        raise ValidationFailed("bundle_unsigned", "Native bundles must be signed; upload it with a signature.",
                               field="bundle_digest")
    return bundle


@transaction.atomic
def native_workload_apply(*, body: dict) -> tuple[NativeWorkload, WorkloadGeneration | None]:
    """Create or update a desired native workload and write its next generation when it changed."""
    data = rules.workload_spec(body, ingress_domains=settings.FOREST_INGRESS_DOMAINS,
                               allow_wildcards=settings.FOREST_INGRESS_ALLOW_WILDCARDS)
    # First, before any other write: the host names (then the slug) this apply may claim, in one order.
    advisory_locks(HOSTNAME_LOCK_CLASS, [*(data["ingress"] or {}).get("hostnames", []), f"workload:{data['slug']}"])
    bundle = _bundle(data["bundle_digest"], team=data["team"])
    grove = None
    if data["grove"]:
        grove = grove_by_reference(data["grove"])
        if grove is None:
            raise ValidationFailed("grove_not_found", f"No Grove '{data['grove']}'.", field="grove")
    owner = NativeWorkload.objects.filter(slug=data["slug"]).values_list("team", flat=True).first()
    if owner is not None and owner != data["team"]:  # a racing apply of another team created it first
        raise Forbidden("team_forbidden", f"Workload '{data['slug']}' belongs to another team; choose another slug.",
                        field="slug")
    fields = {key: data[key] for key in ("environment", "team", "command", "env", "secret_refs", "secrets_mode",
                                         "ports", "probes", "ingress", "restart", "platform", "resources",
                                         "stop_grace_s")}
    workload, _ = NativeWorkload.objects.update_or_create(
        slug=data["slug"], defaults={**fields, "bundle": bundle, "grove": grove})
    _hostnames_claim(workload, (data["ingress"] or {}).get("hostnames", []))
    return workload, native_workload_generation_write(workload=workload)


def _hostnames_claim(workload: NativeWorkload, hostnames: list[str]) -> None:
    """Hold exactly ``hostnames`` for ``workload``; a name another workload holds is refused (409)."""
    held = dict(IngressHostname.objects.filter(hostname__in=hostnames).exclude(workload=workload)
                .values_list("hostname", "workload__slug"))
    for index, name in enumerate(hostnames):
        if name in held:
            raise Conflict("ingress_host_taken", f"Host name '{name}' is already routed to workload "
                           f"'{held[name]}'; remove it there first.", field=f"ingress.hostnames[{index}]")
    IngressHostname.objects.filter(workload=workload).exclude(hostname__in=hostnames).delete()
    for index, name in enumerate(hostnames):
        try:
            with transaction.atomic():  # a racing apply that claimed it first wins; this one is refused
                claim, _ = IngressHostname.objects.get_or_create(hostname=name, defaults={"workload": workload})
        except IntegrityError:
            claim = None
        if claim is None or claim.workload_id != workload.pk:
            raise Conflict("ingress_host_taken", f"Host name '{name}' was just claimed by another workload.",
                           field=f"ingress.hostnames[{index}]")


@transaction.atomic
def native_workload_delete(*, workload: NativeWorkload) -> None:
    """Remove a desired workload with its generations and host names; its route goes at the edge's next
    render. (The agent keeps a removed workload's process until it is restarted without it.)"""
    NativeWorkload.objects.filter(pk=workload.pk).delete()
    log.info("native workload deleted", extra={"workload": workload.slug})


def _requirement(workload: NativeWorkload):
    spec = {"slug": workload.slug, "platform": workload.platform, "resources": workload.resources}
    if workload.grove_id:
        spec["grove"] = str(workload.grove_id)
    return requirement_for_native_workload(spec, artifact={"digest": workload.bundle.digest,
                                                           "platform": workload.bundle.platform or None})


def native_workload_generation_write(*, workload: NativeWorkload) -> WorkloadGeneration | None:
    """The native generation writer: a new generation when the compiled desired state changed.

    Refuses (before anything is written) unless ``FOREST_NATIVE_WORKLOAD_DISPATCH`` is on and the
    placed Grove advertises ``native.workload``. Returns the unchanged latest generation otherwise.
    """
    if not settings.FOREST_NATIVE_WORKLOAD_DISPATCH:
        raise Conflict("native_dispatch_disabled",
                       "Native workload dispatch is off on this Host (FOREST_NATIVE_WORKLOAD_DISPATCH=false).")
    with transaction.atomic():
        workload = NativeWorkload.objects.select_for_update().select_related("bundle").get(pk=workload.pk)
        placement = place_execution(subject_type=SUBJECT_TYPE, subject_id=workload.slug,
                                    requirement=_requirement(workload), team=workload.team or None,
                                    environment=workload.environment)
        grove = placement.grove
        if ChangeKind.NATIVE_WORKLOAD not in grove.change_kinds:
            raise Conflict("grove_lacks_native_workload",
                           f"Grove {grove.slug} does not advertise native.workload (start its agent with "
                           f"--enable-native-workloads).")
        bundle = workload.bundle
        if bundle.team not in ("", workload.team):  # written before bundles were team-scoped
            raise ValidationFailed("artifact_not_found", f"Bundle {bundle.digest} belongs to another team; apply "
                                   f"workload '{workload.slug}' with its own team's bundle.", field="bundle_digest")
        # Runtime compilation: the stored placement may predate this bundle, so its platform is checked
        # against the Grove here (refused under host.deploy.forest_compatibility, else would_refuse).
        artifact_platform_require(artifact=bundle, required=list(grove.platforms), subject_type=SUBJECT_TYPE,
                                  subject_id=workload.slug, grove=grove, environment=workload.environment,
                                  team=workload.team or None)
        values = _secret_values(workload)
        spec = rules.generation_spec(
            workload={"command": workload.command, "env": workload.env, "secret_refs": workload.secret_refs,
                      "secrets_mode": workload.secrets_mode, "ports": workload.ports, "probes": workload.probes,
                      "ingress": workload.ingress, "restart": workload.restart,
                      "stop_grace_s": workload.stop_grace_s},
            bundle={"digest": bundle.digest, "size": bundle.size, "signature": bundle.signature,
                    "key_id": bundle.signing_key_id},
            ingress_enabled=is_enabled(NATIVE_INGRESS_FLAG, environment=workload.environment,
                                       team=workload.team or None),
        )
        digest = rules.spec_digest(spec, values)
        latest = workload.generations.order_by("-number").first()
        if latest is not None and latest.spec_digest == digest and latest.grove_id == grove.pk:
            return latest
        generation = WorkloadGeneration.objects.create(
            workload=workload, number=(latest.number + 1) if latest else 1, grove=grove, spec=spec,
            spec_digest=digest,
        )
        log.info("native workload generation written",
                 extra={"workload": workload.slug, "generation": generation.number, "grove": grove.slug})
    _notify(grove)
    return generation


def _notify(grove: Grove) -> None:
    """Wake the Grove's long-poll once the generation is committed."""
    transaction.on_commit(partial(grove_wake, grove.pk))


@transaction.atomic
def workload_status_record(*, grove: Grove, generation_id, body: dict) -> WorkloadGeneration:
    """Normalise an agent's report into the generation's observed state (one transaction)."""
    data = rules.status_report(body)
    try:
        generation = (WorkloadGeneration.objects.select_for_update()
                      .filter(pk=uuid.UUID(str(generation_id)), grove=grove).first())
    except ValueError:
        generation = None
    if generation is None:
        raise NotFound("generation_not_found", f"No workload generation {generation_id} on this Grove.")
    changes = {"live": data["live"] or data["state"] == GenerationState.LIVE, "restarts": data["restarts"],
               "probes": data["probes"], "reason": data["reason"], "message": data["message"]}
    if data["log_tail"]:
        changes["log_tail"] = data["log_tail"][-200:]
    now = timezone.now()
    GENERATION.apply(generation, data["state"], reason=data["reason"], now=now, changes=changes)
    if generation.state == GenerationState.LIVE:
        # The agent switched atomically to this generation: older ones are no longer running. A bulk
        # transition: only rows in a state the lifecycle lets become superseded are touched.
        WorkloadGeneration.objects.filter(
            workload_id=generation.workload_id, number__lt=generation.number,
            state__in=GENERATION.sources(GenerationState.SUPERSEDED),
        ).update(state=GenerationState.SUPERSEDED, live=False, observed_at=now)
    return generation
