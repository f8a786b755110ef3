"""Reads for native workloads, including the generations a Grove's agent should run."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Max, OuterRef, Q, Subquery

from apps.groves.models import Grove
from apps.workloads import secrets
from apps.workloads.models import WorkloadGeneration, WorkloadSecret
from apps.workloads.vocabulary import GenerationState


def generations_latest_for_grove(grove: Grove):
    """The newest generation of each workload placed on ``grove`` (desired state, level-triggered)."""
    newest = (WorkloadGeneration.objects.filter(workload_id=OuterRef("workload_id"))
              .values("workload_id").annotate(top=Max("number")).values("top"))
    return (WorkloadGeneration.objects.filter(grove=grove, number=Subquery(newest))
            .select_related("workload").order_by("workload__slug"))


SecretKey = tuple[str, str, str]  # (team, environment, name); team "" is a team-less row


def workload_secret_values(keys: Iterable[SecretKey]) -> dict[SecretKey, str]:
    """The one read of secret values (generation writer and ``changes`` alike): each key is looked up under
    exactly its team, a team-less key under team-less rows only, so a workload never resolves another team's
    secret and a team's workload never falls back to a team-less one. Decrypted, in one query; a key with
    no row is absent."""
    by_scope: dict[tuple[str, str], set[str]] = defaultdict(set)
    for team, environment, name in keys:
        by_scope[(team, environment)].add(name)
    if not by_scope:
        return {}
    scope = Q()
    for (team, environment), names in by_scope.items():
        scope |= Q(team=team, environment=environment, name__in=names)
    return {(row.team, row.environment, row.name): secrets.decrypt(row.ciphertext)
            for row in WorkloadSecret.objects.filter(scope)}


def _secret_keys(generation: WorkloadGeneration) -> list[SecretKey]:
    workload = generation.workload
    return [(workload.team, workload.environment, name) for name in generation.spec["secret_names"]]


def generation_payload(generation: WorkloadGeneration, *, base_url: str | None = None,
                       secret_values: dict[SecretKey, str] | None = None) -> dict:
    """A generation as the wire sends it (docs/wire.md): the spec, a bundle URL, and secret values."""
    spec = generation.spec
    keys = _secret_keys(generation)
    if secret_values is None:
        secret_values = workload_secret_values(keys)
    base = (base_url or settings.FOREST_PUBLIC_URL).rstrip("/")
    payload = {
        "generation_id": str(generation.id),
        "workload": generation.workload.slug,
        "generation": generation.number,
        "bundle": {**spec["bundle"], "url": f"{base}/api/forest/v1/artifacts/{spec['bundle']['digest']}/blob"},
        "command": spec["command"],
        "env": spec["env"],
        "secrets": {key[2]: secret_values[key] for key in keys if key in secret_values},
        "secrets_mode": spec["secrets_mode"],
        "ports": spec["ports"],
        "probes": spec["probes"],
        "restart": spec["restart"],
    }
    if spec.get("ingress"):
        payload["ingress"] = spec["ingress"]
    if spec.get("stop_grace_s") is not None:  # absent: the agent's --kill-grace
        payload["stop_grace_s"] = spec["stop_grace_s"]
    return payload


def grove_workloads(grove: Grove, *, base_url: str | None = None) -> tuple[list[dict], bool]:
    """The Grove's desired workload state for ``changes``, and whether any generation in it is news
    (not yet reported on by the agent). Two queries whatever the number of workloads."""
    generations = list(generations_latest_for_grove(grove))
    values = workload_secret_values(key for g in generations for key in _secret_keys(g))
    payloads = [generation_payload(g, base_url=base_url, secret_values=values) for g in generations]
    return payloads, any(g.state == GenerationState.PENDING for g in generations)

