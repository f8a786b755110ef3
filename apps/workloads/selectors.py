"""Reads for native workloads, including the generations a Grove's agent should run."""
from __future__ import annotations

from django.conf import settings
from django.db.models import Max, OuterRef, Subquery

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


def _secret_values(environments: set[str], names: set[str]) -> dict[tuple[str, str], str]:
    """Every secret the given generations need, decrypted, in one query."""
    rows = WorkloadSecret.objects.filter(environment__in=environments, name__in=names)
    return {(row.environment, row.name): secrets.decrypt(row.ciphertext) for row in rows}


def generation_payload(generation: WorkloadGeneration, *, base_url: str | None = None,
                       secret_values: dict[tuple[str, str], str] | None = None) -> dict:
    """A generation as the wire sends it (docs/wire.md): the spec, a bundle URL, and secret values."""
    spec = generation.spec
    environment = generation.workload.environment
    if secret_values is None:
        secret_values = _secret_values({environment}, set(spec["secret_names"]))
    base = (base_url or settings.FOREST_PUBLIC_URL).rstrip("/")
    payload = {
        "generation_id": str(generation.id),
        "workload": generation.workload.slug,
        "generation": generation.number,
        "bundle": {**spec["bundle"], "url": f"{base}/api/forest/v1/artifacts/{spec['bundle']['digest']}/blob"},
        "command": spec["command"],
        "env": spec["env"],
        "secrets": {name: secret_values[(environment, name)] for name in spec["secret_names"]
                    if (environment, name) in secret_values},
        "secrets_mode": spec["secrets_mode"],
        "ports": spec["ports"],
        "probes": spec["probes"],
        "restart": spec["restart"],
    }
    if spec.get("ingress"):
        payload["ingress"] = spec["ingress"]
    return payload


def grove_workloads(grove: Grove, *, base_url: str | None = None) -> tuple[list[dict], bool]:
    """The Grove's desired workload state for ``changes``, and whether any generation in it is news
    (not yet reported on by the agent). Two queries whatever the number of workloads."""
    generations = list(generations_latest_for_grove(grove))
    values = _secret_values({g.workload.environment for g in generations},
                            {name for g in generations for name in g.spec["secret_names"]})
    payloads = [generation_payload(g, base_url=base_url, secret_values=values) for g in generations]
    return payloads, any(g.state == GenerationState.PENDING for g in generations)

