"""Reads for native workloads, including the generations a Grove's agent should run."""
from __future__ import annotations

from django.conf import settings
from django.db.models import Max, OuterRef, Subquery

from apps.groves.models import Grove
from apps.workloads import secrets
from apps.workloads.choices import GenerationState
from apps.workloads.models import WorkloadGeneration, WorkloadSecret


def generations_latest_for_grove(grove: Grove):
    """The newest generation of each workload placed on ``grove`` (desired state, level-triggered)."""
    newest = (WorkloadGeneration.objects.filter(workload_id=OuterRef("workload_id"))
              .values("workload_id").annotate(top=Max("number")).values("top"))
    return (WorkloadGeneration.objects.filter(grove=grove, number=Subquery(newest))
            .select_related("workload").order_by("workload__slug"))


def generations_unreported_exist(grove: Grove) -> bool:
    """Whether the agent has a generation it has not reported on yet (news for its long-poll)."""
    return generations_latest_for_grove(grove).filter(state=GenerationState.PENDING).exists()


def generation_payload(generation: WorkloadGeneration, *, base_url: str | None = None) -> dict:
    """A generation as the wire sends it (docs/wire.md): the spec, a bundle URL, and secret values."""
    spec = generation.spec
    base = (base_url or settings.FOREST_PUBLIC_URL).rstrip("/")
    values = {s.name: secrets.decrypt(s.ciphertext) for s in WorkloadSecret.objects.filter(
        environment=generation.workload.environment, name__in=spec["secret_names"])}
    payload = {
        "generation_id": str(generation.id),
        "workload": generation.workload.slug,
        "generation": generation.number,
        "bundle": {**spec["bundle"], "url": f"{base}/api/forest/v1/artifacts/{spec['bundle']['digest']}/blob"},
        "command": spec["command"],
        "env": spec["env"],
        "secrets": values,
        "secrets_mode": spec["secrets_mode"],
        "ports": spec["ports"],
        "probes": spec["probes"],
        "restart": spec["restart"],
    }
    if spec.get("ingress"):
        payload["ingress"] = spec["ingress"]
    return payload


def generations_for_grove(grove: Grove, *, base_url: str | None = None) -> list[dict]:
    return [generation_payload(g, base_url=base_url) for g in generations_latest_for_grove(grove)]
