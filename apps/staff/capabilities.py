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
    evidence: str  # what the tests drive (or which hardware is missing), in words
    flag: str = ""  # the flag that gates it (state GATED), default off
    setting: str = ""  # a process-level switch that also gates it
    # The tests that prove it: repository paths, optionally ``path::test_name`` (a test checks each exists).
    tests: tuple[str, ...] = ()
    # Where it is implemented: repository paths (a test checks each exists, and that a row whose code exists
    # never says the code is missing).
    code: tuple[str, ...] = ()


CAPABILITIES: tuple[Capability, ...] = (
    Capability("Grove enrollment, heartbeat and capacity reports", TESTED,
               "real PostgreSQL, a live HTTP server, the agent's own client",
               tests=("tests/groves/test_services.py", "tests/groves/test_live_server.py", "agent/tests/test_cli.py"),
               code=("apps/groves/services.py", "agent/src/forest_agent/wire/client.py")),
    Capability("Grove readiness apart from liveness; unclaimed jobs signalled and ended", TESTED,
               "polls through the lean and Django routes, the readiness rule, the unclaimed policy",
               tests=("tests/placement/test_readiness.py", "tests/dispatch/test_unclaimed.py",
                      "tests/dispatch/test_lean.py::test_a_poll_or_a_claim_makes_a_grove_ready_and_writes_at_most_once_per_window"),
               code=("apps/placement/rules.py", "apps/dispatch/services.py")),
    Capability("Placement with per-candidate verdicts (shadow mode)", TESTED,
               "rules, services, concurrency, API; one outcome rendering on every surface",
               tests=("tests/placement/test_services.py", "tests/placement/test_concurrency.py",
                      "tests/placement/test_api.py", "tests/staff/test_outcome.py"),
               code=("apps/placement/services.py", "apps/placement/outcome.py")),
    Capability("Refusing incompatible placements before dispatch", GATED, "flag on and off",
               flag="host.deploy.forest_compatibility",
               tests=("tests/placement/test_services.py", "tests/placement/test_readiness.py"),
               code=("apps/placement/services.py",)),
    Capability("Persisted placements re-read on retry", GATED, "default on",
               flag="host.deploy.persisted_placement", tests=("tests/placement/test_services.py",),
               code=("apps/placement/services.py",)),
    Capability("Pipeline runs on Groves with a transactional outbox", TESTED,
               "a real Celery worker and Redis, the real agent process",
               tests=("tests/pipelines/test_reliability.py", "tests/e2e/test_native_agent.py"),
               code=("apps/pipelines/services",)),
    Capability("Step inputs and outputs with lineage (native agent, Kubernetes controller)", TESTED,
               "the real agent; the controller on a fake Kubernetes API whose kubelet runs the pod's commands",
               tests=("tests/e2e/test_step_data.py", "tests/e2e/test_kube_step_data.py",
                      "tests/artifacts/test_inputs.py"),
               code=("apps/pipelines/services/inputs.py", "agent/src/forest_agent/data.py")),
    Capability("Detached waiting (runner released while the Grove job runs)", GATED, "flag on and off",
               flag="host.pipeline_detached_wait", setting="PIPELINE_DETACHED_WAIT_ENVIRONMENT_IDS",
               tests=("tests/pipelines/test_services.py",), code=("apps/pipelines/services",)),
    Capability("Compute jobs (API, CLI, MCP) and their staff page", GATED, "API, CLI, MCP over stdio, staff page",
               flag="host.deploy.forest_compute_jobs",
               tests=("tests/compute/test_api.py", "tests/cli/test_cli.py", "tests/cli/test_mcp.py",
                      "tests/staff/test_compute_page.py"),
               code=("apps/compute/services.py", "forest_cli/main.py")),
    Capability("Accelerator entitlements, budgets and concurrency", GATED, "admission, accrual, concurrency",
               flag="host.accelerators.policy",
               tests=("tests/accelerators/test_services.py", "tests/accelerators/test_concurrency.py"),
               code=("apps/accelerators/services.py",)),
    Capability("Native jobs run by forest-agent as host processes", TESTED,
               "the real agent process and a real Celery worker",
               tests=("tests/e2e/test_native_agent.py", "agent/tests/test_jobs.py"),
               code=("agent/src/forest_agent/native",)),
    Capability("Native workloads (signed bundles, probes, restarts)", TESTED,
               "the real agent; Host side needs FOREST_NATIVE_WORKLOAD_DISPATCH",
               setting="FOREST_NATIVE_WORKLOAD_DISPATCH",
               tests=("tests/e2e/test_native_workload.py", "agent/tests/test_workloads.py"),
               code=("apps/workloads/services.py",)),
    Capability("Native ingress: public TLS at Host's nginx edge, plain HTTP over the mesh to the agent's proxy",
               GATED, "both hops on Debian's nginx, the real agent, TLS from a test CA, a loopback mesh",
               flag="host.deploy.native_ingress",
               tests=("tests/e2e/test_native_ingress.py", "agent/tests/test_nginx.py"),
               code=("apps/ingress", "agent/src/forest_agent/nginx.py")),
    Capability("Staff observability pages and staff read API", GATED, "views, API, query counts, Chromium",
               flag="host.staff.execution_observability",
               tests=("tests/staff/test_views.py", "tests/staff/test_api.py", "tests/e2e/test_staff_browser.py"),
               code=("apps/staff/views.py",)),
    Capability("Feature flags with audited changes in Django admin", TESTED,
               "every declared flag toggled from its admin page in Chromium",
               tests=("tests/flags/test_flags.py",
                      "tests/e2e/test_staff_browser.py::test_every_declared_flag_toggles_from_its_own_admin_page"),
               code=("apps/flags/admin.py",)),
    Capability("Infrastructure plans and apply policy (OpenTofu modules)", TESTED, "a real HCL parser and engine",
               tests=("tests/infra/test_engine.py", "tests/infra/test_command.py"), code=("apps/infra/engine.py",)),
    Capability("Metrics on /metrics and structured logs", TESTED, "scrapes and log lines",
               tests=("tests/staff/test_metrics.py", "tests/core/test_api_errors.py"),
               code=("apps/staff/metrics.py",)),
    Capability("`make run`'s local settings, database creation, users and teams commands", TESTED,
               "new shells as subprocesses, the real PostgreSQL", tests=("tests/core/test_localenv.py",),
               code=("apps/core/localenv.py",)),
    Capability("Kubernetes Groves driven by forest-controller", TESTED,
               "the real forest-controller process against a fake Kubernetes API server over real HTTP (its "
               "kubelet runs the commands locally); never run on a real cluster",
               tests=("tests/e2e/test_kube_controller.py", "agent/tests/test_kube_controller.py",
                      "agent/tests/test_kube_render.py"),
               code=("agent/src/forest_agent/kube",)),
    Capability("Jobs on an NVIDIA GPU (CUDA)", HARDWARE,
               "an NVIDIA GPU: inventory and admission are tested with reported devices only",
               tests=("agent/tests/test_inventory.py", "tests/examples/test_gpu_smoke.py"),
               code=("agent/src/forest_agent/inventory",)),
    Capability("Jobs on Apple silicon (Metal, unified memory)", HARDWARE,
               "a Mac: the darwin/arm64 agent inventory is tested with reported devices only",
               tests=("agent/tests/test_inventory.py",), code=("agent/src/forest_agent/inventory",)),
)

# Words a row may use only when none of its code exists (the registry once said "no forest-controller is in
# this repository" while the controller and its end-to-end test were here).
MISSING_WORDS = ("not in this repository", "no forest-controller", "is missing", "nothing here executes",
                 "not implemented")

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
    lines = ["| capability | status | evidence | proven by |", "|---|---|---|---|"]
    for capability in CAPABILITIES:
        status = state_label(capability, defaults)
        if capability.setting:
            status += f"; also `{capability.setting}`"
        tests = ", ".join(f"`{test}`" for test in capability.tests) or "—"
        lines.append(f"| {capability.name} | {status} | {capability.evidence} | {tests} |")
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
