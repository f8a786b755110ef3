#!/usr/bin/env python3
"""A focused mutation check: does the suite notice when a rule is broken in the most plausible way?

Each entry of ``MUTANTS`` is one realistic break of one rule (a permission swapped for a weaker one, a
bound dropped, a weight ignored, a gate removed), written as an exact text replacement in one source file,
with the tests that cover that rule. For each, the script applies the break, runs only those tests (one
pytest process, ``-x``, the test database reused), restores the file, and records (after one run of all
the chosen tests without any break, which must pass, or a "killed" would prove nothing):

* ``killed``: the tests failed with the break (the suite bites);
* ``survived``: they passed (a test is missing or passes for another reason);
* ``not run``: every test was skipped (e.g. Debian's nginx is not installed);
* ``stale``: the text to replace is no longer in the file exactly once (the code moved; update the entry).

The file is restored in a ``finally`` (and on SIGINT/SIGTERM), so an interrupted run leaves the tree as it
found it. The score is killed / (killed + survived). Exit status 0 only when nothing survived and nothing is
stale. Run it from the repository root with the test environment (``make mutation`` sets it)::

    scripts/mutation_check.py            # every mutant
    scripts/mutation_check.py --list     # names and what each breaks
    scripts/mutation_check.py why_ignores_weights ties_by_slug   # some of them

docs/decisions.md "Tests that bite (issue 35, item 1)" says why it is curated rather than generated.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository root
    find: str  # exact text, present exactly once
    replace: str
    tests: tuple[str, ...]  # pytest node ids or files
    why: str


MUTANTS: tuple[Mutant, ...] = (
    # --- permissions ------------------------------------------------------------------------------------
    Mutant("run_cancel_view_permission", "apps/pipelines/services/runs.py",
           'authorize(actor, "pipelines.change_pipelinerun", team=run.team, what="this run")',
           'authorize(actor, "pipelines.view_pipelinerun", team=run.team, what="this run")',
           ("tests/pipelines/test_services.py::test_the_cancel_service_itself_demands_the_change_permission",),
           "the run-cancel service checks view instead of change"),
    Mutant("compute_cancel_view_permission", "apps/compute/services.py",
           'authorize(actor, "compute.change_computejob", team=job.team, what="this compute job")',
           'authorize(actor, "compute.view_computejob", team=job.team, what="this compute job")',
           ("tests/compute/test_services.py",),
           "the compute-job cancel service checks view instead of change"),
    Mutant("staff_run_rows_unscoped", "apps/staff/selectors.py",
           "return visible(PipelineRun.objects, user).only(",
           "return PipelineRun.objects.only(",
           ("tests/staff/test_scoping_guard.py::test_each_selector_shows_one_teams_rows_and_not_anothers",),
           "the staff run list takes the user and ignores it"),
    Mutant("staff_running_here_unscoped", "apps/staff/selectors.py",
           "mine = [nodes[job] for job in jobs if job in nodes and _sees(user, nodes[job].run.team)]",
           "mine = [nodes[job] for job in jobs if job in nodes]",
           ("tests/staff/test_scoping_guard.py::test_each_selector_shows_one_teams_rows_and_not_anothers",),
           "a Grove's page lists other teams' running jobs"),
    # --- the registry client ------------------------------------------------------------------------------
    Mutant("registry_https_to_http", "apps/artifacts/registry.py",
           'if target is None or target.scheme not in ("http", "https") or (\n'
           '                    url.scheme == "https" and target.scheme == "http"):',
           'if target is None or target.scheme not in ("http", "https"):',
           ("tests/artifacts/test_ssrf.py::test_a_redirect_from_https_to_plain_http_is_never_followed",),
           "an HTTPS registry's redirect to plain HTTP is followed"),
    Mutant("registry_deadline_per_request", "apps/artifacts/registry.py",
           "if self._egress is None:  # the first request starts the import's one deadline",
           "if True:",
           ("tests/artifacts/test_ssrf.py::test_every_request_of_one_import_shares_its_deadline",),
           "each registry request gets its own deadline (no total)"),
    # --- placement ----------------------------------------------------------------------------------------
    Mutant("snapshot_readiness_never_expires", "apps/placement/fleet.py",
           "while self._polls and self._polls[0][0] < cutoff:",
           "while False:",
           ("tests/placement/test_readiness.py",),
           "the placement snapshot never expires readiness"),
    Mutant("readiness_rule_off", "apps/placement/rules.py",
           "def _readiness(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:\n"
           "    if grove.ready:",
           "def _readiness(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:\n"
           "    if True:",
           ("tests/placement/test_readiness.py",),
           "a Grove that never polls is eligible"),
    Mutant("ties_by_slug", "apps/placement/decide.py",
           "return sorted(tie, key=lambda item: (order(item[2].facts.id), item[1]))",
           "return sorted(tie, key=lambda item: (item[2].facts.slug, item[1]))",
           ("tests/placement/test_services.py::"
            "test_equal_groves_are_chosen_by_the_hash_of_subject_and_grove_never_by_slug",),
           "ties broken by slug instead of the hash"),
    Mutant("tie_key_ignores_subject", "apps/placement/scoring.py",
           'prefix = hashlib.blake2b(f"{subject}\\x00".encode(), digest_size=8)',
           'prefix = hashlib.blake2b(b"\\x00", digest_size=8)',
           ("tests/placement/test_scoring.py",),
           "the tie key hashes the Grove alone (every subject to the same Grove)"),
    Mutant("why_ignores_weights", "apps/placement/scoring.py",
           "contribution = weight * (mine - theirs)",
           "contribution = mine - theirs",
           ("tests/placement/test_scoring.py",),
           '"why here" ignores the weights'),
    Mutant("preview_no_fresh_refusal", "apps/placement/services.py",
           "if decision.refusal is not None and decision.chooser != Chooser.EXPLICIT:",
           "if False:",
           ("tests/placement/test_policies.py::test_a_permanent_refusal_is_never_issued_from_a_stale_view",),
           "a preview refuses from a stale view"),
    # --- dispatch -----------------------------------------------------------------------------------------
    Mutant("unclaimed_recheck_ignores_readiness", "apps/dispatch/services.py",
           "and (polled is None or now - polled > timedelta(seconds=settings.GROVE_READY_WITHIN_S)))",
           ")",
           ("tests/dispatch/test_unclaimed.py",),
           "the unclaimed policy's re-check ignores readiness"),
    Mutant("unclaimed_signal_early", "apps/dispatch/rules.py",
           'if status != "assigned" or (now - created_at).total_seconds() < after_s:',
           'if status != "assigned":',
           ("tests/dispatch/test_unclaimed.py",),
           "every assigned job is signalled unclaimed at once"),
    # --- artifacts ----------------------------------------------------------------------------------------
    Mutant("lineage_depth_uncapped", "apps/artifacts/selectors.py",
           "depth = max(1, min(depth, MAX_LINEAGE_DEPTH))",
           "depth = max(1, depth)",
           ("tests/artifacts/test_lineage_bounds.py",),
           "lineage depth is not capped at 5"),
    Mutant("lineage_row_cut_never", "apps/artifacts/selectors.py",
           "if len(found) > room:",
           "if False:",
           ("tests/artifacts/test_lineage_bounds.py",),
           "the 500-row cut never fires"),
    # --- core ---------------------------------------------------------------------------------------------
    Mutant("redis_timeout_is_500", "apps/core/outage.py",
           "| redis.exceptions.TimeoutError)",
           ")",
           ("tests/core/test_outage.py",),
           "a Redis TimeoutError becomes a 500"),
    Mutant("compute_inputs_unbounded", "apps/pipelines/bodies.py",
           "Inputs = Annotated[list[StepInput], Field(max_length=MAX_INPUTS), AfterValidator(_inputs_unique)]",
           "Inputs = Annotated[list[StepInput], AfterValidator(_inputs_unique)]",
           ("tests/compute/test_bodies.py",),
           "the step declaration (a compute step's and a node's) loses the inputs bound"),
    # --- the agent and the controller ---------------------------------------------------------------------
    Mutant("agent_output_digest_unchecked", "agent/src/forest_agent/data.py",
           'if not hmac.compare_digest(str(artifact.get("digest")), digest):',
           "if False:",
           ("agent/tests/test_output_digest.py",),
           "the agent does not compare the digest Host stored with the one it sent"),
    Mutant("mesh_outsider_421", "agent/src/forest_agent/nginx.py",
           '"    if ($forest_mesh_source = 0) {\\n        return 403;\\n    }\\n"',
           '""',
           ("agent/tests/test_nginx.py::test_a_source_outside_the_mesh_is_refused_whatever_host_it_names",),
           "a non-mesh source with an unknown host gets 421 instead of 403"),
    Mutant("leader_deadline_from_end", "agent/src/forest_agent/kube/leader.py",
           "        self.holder = settings.identity\n"
           "        self._valid_until = started + settings.renew_deadline_s\n"
           "        return True\n\n    # -- the loop",
           "        self.holder = settings.identity\n"
           "        self._valid_until = self._clock() + settings.renew_deadline_s\n"
           "        return True\n\n    # -- the loop",
           ("agent/tests/test_kube_leader.py::test_the_deadline_counts_from_the_start_of_a_slow_renewal",),
           "the leader's renew deadline counted from the end of the renewal"),
    Mutant("controller_claims_without_the_gate", "agent/src/forest_agent/kube/reconcile.py",
           "while tracked is not None and self.may_act():",
           "while tracked is not None:",
           ("agent/tests/test_kube_leader.py::test_a_controller_that_may_not_act_claims_nothing",),
           "the controller's leader gate removed from claiming"),
    Mutant("controller_takes_changes_without_the_gate", "agent/src/forest_agent/kube/controller.py",
           "        if not self._may_act():\n            return  # Host offers them again to whoever leads\n",
           "",
           ("agent/tests/test_kube_leader.py::test_a_controller_that_may_not_act_claims_nothing",),
           "the controller takes offered jobs while not leading"),
    Mutant("agent_guardian_not_started", "agent/src/forest_agent/agent.py",
           "            self.guardian.start()\n",
           "            pass\n",
           ("agent/tests/test_workload_stop.py::test_a_sigkilled_agent_leaves_nothing_behind",),
           "a killed agent's workloads are left running (no guardian)"),
    Mutant("agent_second_signal_kills", "agent/src/forest_agent/clikit.py",
           "        if hurry is not None and not hurry.is_set():",
           "        if False:",
           ("agent/tests/test_workload_stop.py::test_a_second_signal_hurries_the_stop_and_still_stops_the_workloads",),
           "a second SIGTERM kills the agent before it stops its workloads (the make run leak)"),
    Mutant("agent_signals_only_the_leader", "agent/src/forest_agent/native/processes.py",
           "        os.killpg(pgid, sig)",
           "        os.kill(pgid, sig)",
           ("agent/tests/test_workload_stop.py::test_sigterm_stops_the_whole_process_group_sigterm_first",),
           "stopping a workload signals its main process, not its process group"),
    Mutant("service_state_dir_read_only", "agent/src/forest_agent/service.py",
           '            f"ReadWritePaths={writable}",',
           '            f"ReadWritePaths={\' \'.join(settings.writable)}",',
           ("agent/tests/test_service.py::test_the_unit_is_hardened_and_restarts_on_failure",),
           "the sandboxed unit no longer lets the agent write its state directory"),
)


def _pytest(tests: tuple[str, ...], timeout_s: float) -> tuple[str, float]:
    """Run ``tests``; "killed", "survived" or "not run" (everything skipped), and the seconds it took."""
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "--reuse-db",
               "-W", "ignore", *tests]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return "killed", time.monotonic() - started  # a hang with the break is the suite noticing it
    took = time.monotonic() - started
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode == 0:
        return ("survived" if " passed" in summary else "not run"), took
    if done.returncode in (2, 3, 4, 5):  # interrupted, internal error, usage error, nothing collected
        raise SystemExit(f"pytest could not run {' '.join(tests)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return "killed", took


def run(mutants: list[Mutant], *, timeout_s: float) -> dict[str, str]:
    results: dict[str, str] = {}
    for mutant in mutants:
        path = ROOT / mutant.path
        original = path.read_text()
        if original.count(mutant.find) != 1:
            results[mutant.name] = "stale"
            print(f"{'stale':9} {mutant.name}: the text to replace is not in {mutant.path} exactly once", flush=True)
            continue

        def restore(signum=None, frame=None, path=path, original=original):
            path.write_text(original)
            if signum is not None:
                raise SystemExit(f"interrupted; {path} restored")

        previous = {sig: signal.signal(sig, restore) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            path.write_text(original.replace(mutant.find, mutant.replace))
            outcome, took = _pytest(mutant.tests, timeout_s)
        finally:
            restore()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        results[mutant.name] = outcome
        print(f"{outcome:9} {mutant.name} ({took:.0f} s): {mutant.why}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="only these mutants (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's tests (default 300)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the first run of the chosen tests without any break")
    args = parser.parse_args(argv)
    if args.list:
        for mutant in MUTANTS:
            print(f"{mutant.name:44} {mutant.path}: {mutant.why}")
        return 0
    known = {mutant.name: mutant for mutant in MUTANTS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"no such mutant: {', '.join(unknown)} (see --list)")
    chosen = [known[name] for name in args.names] if args.names else list(MUTANTS)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    started = time.monotonic()
    if not args.no_baseline:
        # A break "killed" by tests that fail anyway proves nothing: the chosen tests must pass unbroken first.
        tests = tuple(dict.fromkeys(test for mutant in chosen for test in mutant.tests))
        outcome, took = _pytest(tests, args.timeout * 2)
        if outcome == "killed":
            listed = "\n  ".join(tests)
            print(f"baseline: the tests fail without any break ({took:.0f} s); fix them first:\n  {listed}")
            return 2
        print(f"baseline: the chosen tests pass unbroken ({took:.0f} s)", flush=True)
    results = run(chosen, timeout_s=args.timeout)
    counts = {outcome: sum(1 for value in results.values() if value == outcome)
              for outcome in ("killed", "survived", "not run", "stale")}
    judged = counts["killed"] + counts["survived"]
    score = counts["killed"] / judged if judged else 1.0
    print(f"mutation score {score:.0%}: {counts['killed']} killed, {counts['survived']} survived, "
          f"{counts['not run']} not run, {counts['stale']} stale, in {time.monotonic() - started:.0f} s")
    return 0 if counts["survived"] == 0 and counts["stale"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
