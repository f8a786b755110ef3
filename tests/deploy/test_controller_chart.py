"""charts/forest-controller rendered offline by Helm itself, every object validated against the pinned
Kubernetes schemas, compared with golden files, its RBAC held to a reviewed allow-list, its pods to Pod
Security `restricted`, its values to values.schema.json, and its arguments to the controller's own CLI.

Goldens: `pytest tests/deploy --update-goldens` rewrites them; review the diff before committing.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from forest_agent.kube import render as kube_render
from forest_agent.kube.cli import build_parser
from forest_agent.kube.validate import KUBERNETES_VERSION, schema_validate

from tests.deploy.chart import (
    CONTROLLER_CHART,
    GROVE_MODULE,
    NAMESPACE,
    STANDALONE,
    assert_pod_security_restricted,
    golden_text,
    render_objects,
)

GOLDENS = Path(__file__).resolve().parent / "goldens"
ALLOWLIST = Path(__file__).resolve().parent / "rbac-allowlist.yaml"
SCENARIOS = {"standalone": STANDALONE, "grove-module": GROVE_MODULE}
WORK_NAMESPACES = ("forest", "forest-untrusted")


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_rendered_object_is_valid_for_the_pinned_kubernetes(scenario):
    objects = render_objects(SCENARIOS[scenario])
    assert objects
    for obj in objects:
        schema_validate(obj, version=KUBERNETES_VERSION)  # strict: an unknown field fails


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_matches_the_golden_file(scenario, update_goldens):
    golden = GOLDENS / f"forest-controller-{scenario}.yaml"
    text = golden_text(SCENARIOS[scenario])
    if update_goldens:
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs; rerun with --update-goldens and review"


def test_helm_lint_passes_strict():
    report = helm.lint(CONTROLLER_CHART, STANDALONE, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    errors = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not errors, report


# -- RBAC ------------------------------------------------------------------------------------------------
def granted(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The rendered rules as allow-list lines, by scope (own-namespace, work, cluster)."""
    scopes: dict[str, set[str]] = {"own-namespace": set(), "work": set(), "cluster": set()}
    work_lines: dict[str, set[str]] = {}
    for obj in by_kind(objects, "Role") + by_kind(objects, "ClusterRole"):
        namespace = obj["metadata"].get("namespace")
        lines: set[str] = set()
        for rule in obj.get("rules") or []:
            for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                assert "*" not in (rule.get(field) or []), f"{obj['metadata']['name']}: wildcard in {field}"
            assert not rule.get("nonResourceURLs")
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for name in rule.get("resourceNames") or [""]:
                            lines.add(" ".join(filter(None, (group or "core", resource, verb, name))))
        if obj["kind"] == "ClusterRole":
            scopes["cluster"] |= lines
        elif namespace == NAMESPACE:
            scopes["own-namespace"] |= lines
        else:
            work_lines[namespace] = lines
    assert set(work_lines) == set(WORK_NAMESPACES), "a Role in each work namespace, nowhere else"
    first, *others = work_lines.values()
    assert all(lines == first for lines in others), "every work namespace gets the same Role"
    scopes["work"] = first
    return scopes


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rbac_is_exactly_the_reviewed_allowlist(scenario):
    """Fails on any widening (a new verb, resource, wildcard, or a name dropped from a rule) and on any
    narrowing, so the allow-list is always the truth."""
    allowed = {scope: set(lines) for scope, lines in yaml.safe_load(ALLOWLIST.read_text()).items()}
    assert granted(render_objects(SCENARIOS[scenario])) == allowed


def test_the_rbac_test_catches_a_widened_rule():
    objects = render_objects(STANDALONE)
    widened = copy.deepcopy(objects)
    cluster_role = by_kind(widened, "ClusterRole")[0]
    cluster_role["rules"][1]["verbs"].append("delete")
    allowed = {scope: set(lines) for scope, lines in yaml.safe_load(ALLOWLIST.read_text()).items()}
    assert granted(widened) != allowed
    wildcard = copy.deepcopy(objects)
    by_kind(wildcard, "Role")[0]["rules"][0]["verbs"] = ["*"]
    with pytest.raises(AssertionError, match="wildcard"):
        granted(wildcard)


def test_secrets_are_read_and_the_lease_reached_only_by_name():
    """No Secret is readable unless named (the identity); the only unnamed Secret verbs are create and patch,
    for the per-job data tokens the controller writes in its work namespaces (ClusterRoles have none)."""
    for obj in by_kind(render_objects(STANDALONE), "Role") + by_kind(render_objects(STANDALONE), "ClusterRole"):
        for rule in obj["rules"]:
            unnamed_secret_writes = (obj["kind"] == "Role" and set(rule["verbs"]) <= {"create", "patch"})
            if ("secrets" in rule["resources"] and not unnamed_secret_writes) or (
                    "leases" in rule["resources"] and rule["verbs"] != ["create"]):
                assert rule.get("resourceNames"), obj["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    cluster_rules = by_kind(render_objects(STANDALONE), "ClusterRole")[0]["rules"]
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"} for rule in cluster_rules), "read-only"


def test_every_binding_names_the_charts_service_account_only():
    objects = render_objects(STANDALONE)
    account = by_kind(objects, "ServiceAccount")[0]["metadata"]
    for binding in by_kind(objects, "RoleBinding") + by_kind(objects, "ClusterRoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}
        ]


# -- Pod Security restricted, resources, probes ------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_controller_pod_meets_pod_security_restricted(scenario):
    deployment = by_kind(render_objects(SCENARIOS[scenario]), "Deployment")[0]
    pod = deployment["spec"]["template"]["spec"]
    assert_pod_security_restricted(pod)
    for volume in pod["volumes"]:
        assert "persistentVolumeClaim" not in volume, volume
    for container in pod["containers"] + pod.get("initContainers", []):
        assert not container.get("ports")  # it serves nothing: the NetworkPolicy admits no ingress


def test_replicas_lead_by_lease_and_roll_without_a_gap():
    deployment = by_kind(render_objects(STANDALONE), "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-elect" in args and "--identity-secret=forest-controller-identity" in args


# -- the controller accepts what the chart passes -----------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_controller_cli_parses_the_rendered_arguments(scenario):
    container = by_kind(render_objects(SCENARIOS[scenario]), "Deployment")[0]["spec"]["template"]["spec"][
        "containers"][0]
    env = {e["name"] for e in container["env"]}
    argv = [re.sub(r"\$\((\w+)\)", lambda m: f"value-of-{m.group(1)}", arg) for arg in container["args"]]
    for reference in re.findall(r"\$\((\w+)\)", " ".join(container["args"])):
        assert reference in env, f"{reference} is not set in the container's env"
    args = build_parser().parse_args(argv)
    assert args.command == "run" and args.leader_elect and args.in_cluster
    assert args.apply_namespaces is False  # the chart installs the untrusted namespace itself
    assert (args.namespace, args.untrusted_namespace) == WORK_NAMESPACES


def test_the_configmap_keys_the_pod_reads_are_the_grove_modules():
    """The chart reads host.url, grove.name and controller.log_level: the keys the Grove module's config
    submodule writes (infra/modules/grove/modules/config/main.tf)."""
    config_tf = (CONTROLLER_CHART.parents[1] / "infra/modules/grove/modules/config/main.tf").read_text()
    container = by_kind(render_objects(GROVE_MODULE), "Deployment")[0]["spec"]["template"]["spec"][
        "containers"][0]
    keys = {e["valueFrom"]["configMapKeyRef"]["key"] for e in container["env"] if "configMapKeyRef" in e.get(
        "valueFrom", {})}
    assert keys == {"host.url", "grove.name", "controller.log_level"}
    for key in keys:
        assert f'"{key}"' in config_tf
    refs = {e["valueFrom"]["configMapKeyRef"]["name"] for e in container["env"] if "configMapKeyRef" in e.get(
        "valueFrom", {})}
    assert refs == {"forest-controller"}
    volumes = {v["name"]: v for v in by_kind(render_objects(GROVE_MODULE), "Deployment")[0]["spec"]["template"][
        "spec"]["volumes"]}
    assert volumes["enrollment"]["secret"]["secretName"] == "forest-controller-enrollment"
    assert not by_kind(render_objects(GROVE_MODULE), "ConfigMap"), "the module's ConfigMap is used, not a copy"
    annotations = by_kind(render_objects(GROVE_MODULE), "Deployment")[0]["spec"]["template"]["metadata"][
        "annotations"]
    assert annotations == {"forest.dev/config-sha256": "0" * 64}  # the module's deploy trigger, alone


def test_the_untrusted_namespace_and_policy_match_what_the_controller_renders():
    """One fact: the chart installs the untrusted namespace the controller would otherwise apply."""
    objects = render_objects(STANDALONE)
    config = kube_render.RenderConfig(grove_id="g", namespace="forest", untrusted_namespace="forest-untrusted")
    expected_ns = kube_render.render_untrusted_namespace(config)
    expected_policy = kube_render.render_isolation_policy(config)
    namespace = next(o for o in by_kind(objects, "Namespace") if o["metadata"]["name"] == "forest-untrusted")
    security = {k: v for k, v in namespace["metadata"]["labels"].items() if k.startswith("pod-security.")}
    assert security == {k: v for k, v in expected_ns["metadata"]["labels"].items() if k.startswith("pod-security.")}
    policy = next(o for o in by_kind(objects, "NetworkPolicy") if o["metadata"]["name"] == "forest-untrusted-deny-all")
    assert policy["spec"] == expected_policy["spec"]
    assert policy["metadata"]["namespace"] == expected_policy["metadata"]["namespace"]


# -- NetworkPolicy -----------------------------------------------------------------------------------------
def test_the_grove_module_passes_exactly_these_values():
    """infra/modules/grove/controller.tf's release values have exactly the keys GROVE_MODULE renders with."""
    from tests.infra.conftest import hcl_load, resources

    release = resources(hcl_load(CONTROLLER_CHART.parents[1] / "infra/modules/grove/controller.tf"))
    values = str(release["helm_release.controller"]["values"]).split("yamlencode(", 1)[1]
    depth, top_level = 0, set()
    for index, char in enumerate(values):
        depth += (char in "{[(" and 1) or 0
        depth -= (char in "}])" and 1) or 0
        if depth == 1 and char in "{,":
            key = re.match(r"[{,]\s*(\w+)\s*=", values[index:])
            if key:
                top_level.add(key.group(1))
    assert top_level == set(GROVE_MODULE), values


def test_the_controller_may_reach_dns_the_api_server_and_host_and_nothing_reaches_it():
    narrowed = {**GROVE_MODULE, "networkPolicy": {"apiServer": {"cidrs": ["10.20.0.10/32"], "ports": [6443]}}}
    policy = next(o for o in by_kind(render_objects(narrowed), "NetworkPolicy")
                  if o["metadata"]["namespace"] == NAMESPACE)
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == []
    dns, api, host = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert api == {"ports": [{"protocol": "TCP", "port": 6443}], "to": [{"ipBlock": {"cidr": "10.20.0.10/32"}}]}
    assert host == {"ports": [{"protocol": "TCP", "port": 443}]}


# -- values.schema.json ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, field", [
    ({"replicas": 2}, "replicas"),
    ({"image": "registry.example.com/forest/forest-controller"}, "image"),
    ({"replicaCount": 0}, "replicaCount"),
    ({"workNamespaces": {"create": True, "trusted": "Forest", "untrusted": "forest-untrusted"}}, "trusted"),
    ({"enrollmentToken": "short"}, "enrollmentToken"),
    ({"networkPolicy": {"host": {"cidrs": ["example.com"], "ports": [443]}}}, "cidrs"),
])
def test_values_schema_refuses_bad_values(bad, field):
    with helm.Chart.load(CONTROLLER_CHART) as chart, pytest.raises(helm.HelmError) as refused:
        chart.validate_schema({**STANDALONE, **bad})
    assert field in str(refused.value)


def test_a_standalone_install_without_config_is_refused():
    with helm.Chart.load(CONTROLLER_CHART) as chart, pytest.raises(helm.HelmError, match="existingConfigMap"):
        chart.render({}, name="forest-controller", namespace=NAMESPACE)
