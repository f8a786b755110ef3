"""Honest status: every capability Forest claims, and how far it is proven here. Pure: no Django.

One registry, rendered into the README (between the ``capability-status`` markers, by
``manage.py capability_status --write``; a test fails when the README is stale or a declared flag has no
row) and on the staff page ``/staff/status/``. The design note insists on saying plainly what is
unproven: *tested end to end here* means a test in this repository drives the real parts named;
*needs hardware not present* means the code path exists but nothing here has run it on that hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

TESTED = "tested end to end here"
GATED = "gated by flag"
HARDWARE = "needs hardware not present"


@dataclass(frozen=True)
class Capability:
    name: str
    state: str  # TESTED | GATED | HARDWARE
    evidence: str  # the tests (or the missing hardware) behind the state
    flag: str = ""  # the flag that gates it (state GATED), default off
    setting: str = ""  # a process-level switch that also gates it


CAPABILITIES: tuple[Capability, ...] = (
    Capability("Grove enrollment, heartbeat and capacity reports", TESTED,
               "tests/groves (real PostgreSQL, live HTTP server), agent/tests"),
    Capability("Placement with per-candidate verdicts (shadow mode)", TESTED,
               "tests/placement (rules, services, concurrency, API)"),
    Capability("Refusing incompatible placements before dispatch", GATED,
               "tests/placement flag on and off", flag="host.deploy.forest_compatibility"),
    Capability("Persisted placements re-read on retry", GATED,
               "tests/placement; default on", flag="host.deploy.persisted_placement"),
    Capability("Pipeline runs on Groves with a transactional outbox", TESTED,
               "tests/pipelines (real Celery worker and Redis), tests/e2e/test_native_agent.py"),
    Capability("Step inputs and outputs with lineage (native agent, Kubernetes controller)", TESTED,
               "tests/e2e/test_step_data.py (real agent), tests/e2e/test_kube_step_data.py (fake cluster), "
               "tests/artifacts/test_inputs.py, bench/data_path.py"),
    Capability("Detached waiting (runner released while the Grove job runs)", GATED,
               "tests/pipelines flag on and off", flag="host.pipeline_detached_wait",
               setting="PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS"),
    Capability("Compute jobs (API, CLI, MCP)", GATED, "tests/compute, tests/cli",
               flag="host.deploy.forest_compute_jobs"),
    Capability("Accelerator entitlements, budgets and concurrency", GATED,
               "tests/accelerators (admission, accrual, concurrency)", flag="host.accelerators.policy"),
    Capability("Native jobs run by forest-agent as host processes", TESTED,
               "tests/e2e/test_native_agent.py (real agent process, real Celery worker)"),
    Capability("Native workloads (signed bundles, probes, restarts)", TESTED,
               "tests/e2e/test_native_workload.py; Host side needs FOREST_NATIVE_WORKLOAD_DISPATCH",
               setting="FOREST_NATIVE_WORKLOAD_DISPATCH"),
    Capability("Native ingress: public TLS at Host's nginx edge, plain HTTP over the mesh to the agent's proxy",
               GATED, "tests/e2e/test_native_ingress.py (both hops on Debian's real nginx, real agent, TLS from a "
               "test CA, loopback mesh), tests/ingress, agent/tests/test_nginx.py",
               flag="host.deploy.native_ingress"),
    Capability("Staff observability pages and staff read API", GATED,
               "tests/staff (views, API, query counts), tests/e2e/test_staff_browser.py (Chromium)",
               flag="host.staff.execution_observability"),
    Capability("Feature flags with audited changes in Django admin", TESTED,
               "tests/flags, tests/e2e/test_admin_browser.py (Chromium)"),
    Capability("Infrastructure plans and apply policy (OpenTofu modules)", TESTED,
               "tests/infra (real HCL parser and engine)"),
    Capability("Metrics on /metrics and structured logs", TESTED,
               "tests/staff/test_metrics.py, tests/core/test_api_errors.py"),
    Capability("Kubernetes Groves driven by forest-controller", HARDWARE,
               "a real Kubernetes cluster; no forest-controller is in this repository yet, so Kubernetes "
               "Groves are enrolled records whose jobs nothing here executes"),
    Capability("Jobs on an NVIDIA GPU (CUDA)", HARDWARE,
               "an NVIDIA GPU: inventory and admission are tested with reported devices only"),
    Capability("Jobs on Apple silicon (Metal, unified memory)", HARDWARE,
               "a Mac: the darwin/arm64 agent inventory is tested with reported devices only"),
)

STATES = (TESTED, GATED, HARDWARE)


def missing_flags(flag_names) -> list[str]:
    """Declared flags that gate no capability row (a test keeps this empty)."""
    covered = {capability.flag for capability in CAPABILITIES if capability.flag}
    return sorted(set(flag_names) - covered)


def state_label(capability: Capability, defaults: dict[str, bool]) -> str:
    if capability.state == GATED:
        default = "on" if defaults.get(capability.flag) else "off"
        return f"gated by flag `{capability.flag}` (default {default})"
    return capability.state


def markdown_table(defaults: dict[str, bool]) -> str:
    """The README table (``defaults``: flag name → default value, from the flag registry)."""
    lines = ["| capability | status | evidence |", "|---|---|---|"]
    for capability in CAPABILITIES:
        status = state_label(capability, defaults)
        if capability.setting:
            status += f"; also `{capability.setting}`"
        lines.append(f"| {capability.name} | {status} | {capability.evidence} |")
    return "\n".join(lines)


BEGIN = "<!-- capability-status:begin (generated by manage.py capability_status --write) -->"
END = "<!-- capability-status:end -->"


def readme_with_table(readme: str, table: str) -> str:
    """The README text with the generated table between the markers (markers must exist)."""
    head, sep, rest = readme.partition(BEGIN)
    if not sep:
        raise ValueError("README has no capability-status markers")
    _old, sep, tail = rest.partition(END)
    if not sep:
        raise ValueError("README has a capability-status begin marker but no end marker")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"
