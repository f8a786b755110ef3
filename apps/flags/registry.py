"""Every feature flag Forest knows, declared in code (docs/design.md §3). Pure: no Django.

A flag name not declared here is a programming error, so reading it raises ``UnknownFlag`` at once:
a typo must never read as "off".
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlagDefinition:
    name: str
    default: bool
    stage: str  # internal | experimental | beta | stable
    description: str


class UnknownFlag(KeyError):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"'{self.name}' is not a declared feature flag (see apps/flags/registry.py)."


# Names other apps test by (one spelling each).
FOREST_COMPATIBILITY = "host.deploy.forest_compatibility"
PERSISTED_PLACEMENT = "host.deploy.persisted_placement"
DETACHED_WAIT = "host.pipeline_detached_wait"
COMPUTE_JOBS = "host.deploy.forest_compute_jobs"
ACCELERATOR_POLICY = "host.accelerators.policy"
NATIVE_INGRESS = "host.deploy.native_ingress"
STAFF_OBSERVABILITY = "host.staff.execution_observability"

FLAGS: dict[str, FlagDefinition] = {
    flag.name: flag
    for flag in (
        FlagDefinition(
            FOREST_COMPATIBILITY,
            False,
            "experimental",
            "Refuse incompatible placements, never-placeable plans and wrong-platform artifacts "
            "before dispatch. Off: record and log 'would refuse' only.",
        ),
        FlagDefinition(
            PERSISTED_PLACEMENT,
            True,
            "stable",
            "Write each placement decision and let retries re-read it instead of choosing again.",
        ),
        FlagDefinition(
            DETACHED_WAIT,
            False,
            "experimental",
            "Eligible exec steps release their runner while the Grove job runs (the environment must "
            "also be listed in PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS).",
        ),
        FlagDefinition(
            COMPUTE_JOBS,
            False,
            "internal",
            "The compute job API, CLI and MCP tools.",
        ),
        FlagDefinition(
            ACCELERATOR_POLICY,
            False,
            "internal",
            "Enforce accelerator entitlements, budgets (accelerator-seconds) and concurrency.",
        ),
        FlagDefinition(
            NATIVE_INGRESS,
            False,
            "internal",
            "Expose native workloads publicly: Host's nginx edge terminates TLS and sends plain HTTP over the "
            "mesh to the agent's proxy (manage.py forest_edge).",
        ),
        FlagDefinition(
            STAFF_OBSERVABILITY,
            False,
            "internal",
            "Staff pages and API for Grove inventory and placements.",
        ),
    )
}


def definition(name: str) -> FlagDefinition:
    try:
        return FLAGS[name]
    except KeyError:
        raise UnknownFlag(name) from None
