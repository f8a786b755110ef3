"""Pure graph rules: validation codes with field paths, canonical form, digests, order, GRAPH_DEDUP
eligibility, the state machines and the report body. No database."""
from __future__ import annotations

import pytest

from apps.core.errors import ValidationFailed
from apps.core.lifecycle import IllegalTransition
from apps.dispatch.states import JOB
from apps.pipelines import bodies, rules
from apps.pipelines.states import NODE, run_outcome
from tests.pipelines.graphs import IMAGE, exec_node, graph


def _fails(value, code, field=None):
    with pytest.raises(ValidationFailed) as info:
        bodies.graph_parse(value)
    assert info.value.code == code, info.value.detail
    if field is not None:
        assert info.value.field == field
    return info.value


@pytest.mark.parametrize(("value", "code", "field"), [
    ([], "invalid_type", "graph"),
    ({}, "field_required", "graph.nodes"),
    ({"nodes": [], "x": 1}, "unknown_field", "graph.x"),
    ({"nodes": []}, "graph_empty", "graph.nodes"),
    (graph({"id": "a", "kind": "teleport"}), "invalid_node_kind", "graph.nodes[0].kind"),
    (graph({"id": "A!", "kind": "exec"}), "invalid_node_id", "graph.nodes[0].id"),
    (graph(exec_node("a"), exec_node("a")), "duplicate_node_id", "graph.nodes[1].id"),
    (graph(exec_node("a", needs=["ghost"])), "unknown_node_ref", "graph.nodes[0].needs"),
    (graph(exec_node("a", needs=["a"])), "graph_cycle", "graph.nodes[0].needs"),
    (graph(exec_node("a", image=None)), "image_required", "graph.nodes[0].image"),
    (graph({**exec_node("a", runtime="native"), "image": IMAGE}), "image_not_allowed", "graph.nodes[0].image"),
    (graph({"id": "a", "kind": "exec", "image": IMAGE}), "command_required", "graph.nodes[0].command"),
    (graph(exec_node("a", platform=["linux/amd65"])), "invalid_platform", "graph.nodes[0].platform[0]"),
    (graph(exec_node("a", resources={"cpu_milli": 0})), "out_of_range", "graph.nodes[0].resources.cpu_milli"),
    (graph(exec_node("a", timeout_s=True)), "invalid_type", "graph.nodes[0].timeout_s"),
    (graph(exec_node("a", reuse="sometimes")), "invalid_choice", "graph.nodes[0].reuse"),
    (graph(exec_node("a", inputs=[{"digest": "md5:1", "storage_kind": "cas"}])), "invalid_digest",
     "graph.nodes[0].inputs[0].digest"),
    (graph(exec_node("a", env={"1BAD": "x"})), "invalid_env_name", "graph.nodes[0].env.1BAD"),
    (graph(exec_node("a", colour="red")), "unknown_field", "graph.nodes[0].colour"),
])
def test_bad_graphs_are_refused_with_codes_and_paths(value, code, field):
    _fails(value, code, field)


def test_cycle_is_named_as_a_path():
    error = _fails(graph(exec_node("a", needs=["c"]), exec_node("b", needs=["a"]), exec_node("c", needs=["b"])),
                   "graph_cycle")
    assert "a -> c -> b -> a" in error.detail


def test_canonical_form_and_digest_ignore_spelling():
    one = graph(exec_node("b", needs=["a"], env={"Y": "2", "X": "1"}), exec_node("a"))
    two = graph(exec_node("a", reuse="graph_dedup", trust="trusted", timeout_s=3600),
                exec_node("b", needs=["a", "a"], env={"X": "1", "Y": "2"}, resources={}))
    c1, c2 = bodies.graph_parse(one), bodies.graph_parse(two)
    assert c1 == c2
    assert rules.graph_digest(c1) == rules.graph_digest(c2)
    assert [n["id"] for n in c1["nodes"]] == ["a", "b"]
    assert c1["nodes"][0]["resources"] == {"cpu_milli": 1000, "memory_bytes": 1024**3}
    changed = bodies.graph_parse(graph(exec_node("a", env={"Z": "1"}), exec_node("b", needs=["a"])))
    assert rules.graph_digest(changed) != rules.graph_digest(c1)


def test_topological_order_and_node_digests_follow_needs():
    canonical = bodies.graph_parse(graph(exec_node("z"), exec_node("m", needs=["z"]), exec_node("a", needs=["m"])))
    assert rules.topological_order(canonical) == ["z", "m", "a"]
    digests = rules.node_digests(canonical)
    upstream_changed = bodies.graph_parse(graph(exec_node("z", env={"K": "v"}), exec_node("m", needs=["z"]),
                                                  exec_node("a", needs=["m"])))
    # A node's identity includes what it consumes: changing z changes m and a too.
    assert rules.node_digests(upstream_changed)["a"] != digests["a"]
    # ... but not where it runs or how long we wait.
    pinned = bodies.graph_parse(graph(exec_node("z", grove="box", timeout_s=5), exec_node("m", needs=["z"]),
                                        exec_node("a", needs=["m"])))
    assert rules.node_digests(pinned) == digests


@pytest.mark.parametrize(("node", "code"), [
    (exec_node("a"), None),
    (exec_node("a", reuse="never"), "reuse_never"),
    (exec_node("a", runtime="native"), "host_command"),
    (exec_node("a", trust="untrusted"), "untrusted"),
    (exec_node("a", image="python:3.12"), "image_not_pinned"),
    (exec_node("a", inputs=[{"digest": "sha256:" + "b" * 64, "storage_kind": "cas"}]), "input_not_oci"),
    (exec_node("a", inputs=[{"digest": "sha256:" + "b" * 64, "storage_kind": "oci_registry"}]), None),
    ({"id": "img", "kind": "build_image", "image": IMAGE}, "not_container_exec"),
])
def test_dedup_eligibility(node, code):
    canonical = bodies.graph_parse(graph(node))["nodes"][0]
    assert rules.dedup_exclusion(canonical) == code


@pytest.mark.parametrize(("node", "code"), [
    (exec_node("a"), None),
    (exec_node("a", runtime="native"), "native_step"),
    (exec_node("a", accelerators={"count": 1, "vendor": "nvidia"}), "accelerator_step"),
    ({"id": "img", "kind": "build_image", "image": IMAGE}, "not_exec"),
])
def test_detached_wait_eligibility(node, code):
    canonical = bodies.graph_parse(graph(node))["nodes"][0]
    assert rules.detached_wait_exclusion(canonical) == code


def test_state_machines_refuse_illegal_transitions():
    NODE.check("awaiting", "succeeded")
    with pytest.raises(IllegalTransition) as info:
        NODE.check("cancelled", "succeeded")
    assert info.value.code == "illegal_transition"
    with pytest.raises(IllegalTransition):
        JOB.check("assigned", "succeeded")
    assert run_outcome(["succeeded", "skipped"]) == "failed"
    assert run_outcome(["succeeded", "succeeded"]) == "succeeded"
    assert run_outcome(["succeeded", "awaiting"]) is None


# --- step retries ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "code", "field"), [
    ({"retries": -1}, "out_of_range", "graph.nodes[0].retries"),
    ({"retries": 11}, "out_of_range", "graph.nodes[0].retries"),
    ({"retries": True}, "invalid_type", "graph.nodes[0].retries"),
    ({"retries": 1, "backoff": 5}, "invalid_type", "graph.nodes[0].backoff"),
    ({"retries": 1, "backoff": {"delay": 5}}, "unknown_field", "graph.nodes[0].backoff.delay"),
    ({"retries": 1, "backoff": {"factor": 0}}, "out_of_range", "graph.nodes[0].backoff.factor"),
    ({"retries": 1, "backoff": {"delay_s": 3601}}, "out_of_range", "graph.nodes[0].backoff.delay_s"),
    ({"retries": 1, "backoff": {"delay_s": 60, "max_s": 30}}, "out_of_range", "graph.nodes[0].backoff.max_s"),
    ({"backoff": {"delay_s": 1}}, "backoff_without_retries", "graph.nodes[0].backoff"),
])
def test_bad_retry_policies_are_refused_with_codes_and_paths(extra, code, field):
    _fails(graph(exec_node("a", **extra)), code, field)


def test_retry_policy_canonical_form_and_digests():
    plain = bodies.graph_parse(graph(exec_node("a")))
    assert "retries" not in plain["nodes"][0] and "backoff" not in plain["nodes"][0]
    assert bodies.graph_parse(graph(exec_node("a", retries=0))) == plain  # old graphs keep their digest
    retried = bodies.graph_parse(graph(exec_node("a", retries=2, backoff={"delay_s": 1})))["nodes"][0]
    assert retried["retries"] == 2 and retried["backoff"] == {"delay_s": 1, "factor": 2, "max_s": 600}
    # How often and how patiently a node is tried is not what it computes.
    assert rules.node_digests({"nodes": [retried]}) == rules.node_digests(plain)


def test_retry_schedule_backs_off_and_stops_and_never_retries_a_cancellation():
    node = bodies.graph_parse(graph(exec_node("a", retries=3, backoff={"delay_s": 5, "factor": 3,
                                                                          "max_s": 30})))["nodes"][0]
    assert [rules.retry_delay_s(node, attempt=n) for n in (1, 2, 3, 4)] == [5, 15, 30, None]
    assert rules.retry_after(node, attempt=1, outcome="failed") == 5
    assert rules.retry_after(node, attempt=1, outcome="timed_out") == 5
    assert rules.retry_after(node, attempt=1, outcome="cancelled") is None
    assert rules.retry_after(node, attempt=1, outcome="succeeded") is None
    assert rules.retry_after(bodies.graph_parse(graph(exec_node("b")))["nodes"][0], attempt=1,
                             outcome="failed") is None


def test_node_lifecycle_lets_only_an_awaiting_attempt_go_back_to_the_queue():
    NODE.check("awaiting", "queued")
    for terminal in ("failed", "timed_out", "cancelled"):
        with pytest.raises(IllegalTransition):
            NODE.check(terminal, "queued")
