"""charts/forest-host rendered offline by Helm itself (as charts/forest-controller is): every object validated
against the pinned Kubernetes schemas, compared with a golden file, its pods held to Pod Security
`restricted` with no Kubernetes API access, its probes to the routes and heartbeat files Host really has,
beat to exactly one, the migrate Job to a hook that needs nothing the release has not made yet, and its
values to values.schema.json.

Goldens: `pytest tests/deploy --update-goldens` rewrites them; review the diff before committing.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from forest_agent.kube.validate import KUBERNETES_VERSION, schema_validate

from tests.deploy.chart import HOST_CHART, REPO, assert_pod_security_restricted, golden_text, render_objects
from tests.deploy.host_settings import settings_host_reads

GOLDENS = Path(__file__).resolve().parent / "goldens"
SECRET = "forest-host"
MINIMAL = {"existingSecret": SECRET}
# docs/deploy.md's install: the defaults, the edge on with its certificate, egress narrowed.
PRODUCTION = {
    "image": "registry.example.com/forest/forest-host@sha256:" + "cd" * 32,
    "existingSecret": SECRET,
    "env": {"ALLOWED_HOSTS": "forest.example.com", "CSRF_TRUSTED_ORIGINS": "https://forest.example.com",
            "FOREST_PUBLIC_URL": "https://forest.example.com", "FOREST_CAS_BACKEND": "s3",
            "FOREST_SERVE_STATIC": "true", "FOREST_INGRESS_DOMAINS": "apps.example.com"},
    "edge": {"enabled": True, "tlsSecret": "forest-edge-tls"},
    "networkPolicy": {"database": {"cidrs": ["10.30.0.5/32"], "ports": [5432]}},
}
SCENARIOS = {"minimal": MINIMAL, "production": PRODUCTION}
BACKGROUND = ("worker", "runner", "beat")
HOOK = "helm.sh/hook"


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [obj for obj in by_kind(objects, kind) if obj["metadata"]["name"] == name]
    return found


def pod_of(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """component -> its Deployment or Job."""
    return {obj["metadata"]["labels"]["app.kubernetes.io/component"]: obj
            for obj in by_kind(objects, "Deployment") + by_kind(objects, "Job")}


def container_env(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


def refuse(values: dict[str, Any], field: str) -> None:
    with helm.Chart.load(HOST_CHART) as chart, pytest.raises(helm.HelmError) as refused:
        chart.validate_schema(values)
    assert field in str(refused.value), str(refused.value)


# -- the pinned Kubernetes, goldens, lint ------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("is_upgrade", [False, True], ids=["install", "upgrade"])
def test_every_rendered_object_is_valid_for_the_pinned_kubernetes(scenario, is_upgrade):
    objects = render_objects(SCENARIOS[scenario], HOST_CHART, is_upgrade=is_upgrade)
    assert {"Deployment", "Service", "PodDisruptionBudget", "Job", "ServiceAccount", "NetworkPolicy"} <= {
        obj["kind"] for obj in objects}
    for obj in objects:
        schema_validate(obj, version=KUBERNETES_VERSION)  # strict: an unknown field fails


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_rendering_matches_the_golden_file(scenario, update_goldens):
    golden = GOLDENS / f"forest-host-{scenario}.yaml"
    text = golden_text(SCENARIOS[scenario], HOST_CHART)
    if update_goldens:
        golden.write_text(text)
    assert golden.read_text() == text, f"{golden.name} differs; rerun with --update-goldens and review"


def test_helm_lint_passes_strict():
    report = helm.lint(HOST_CHART, PRODUCTION, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    errors = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not errors, report


def test_every_process_is_rendered_with_the_images_command_for_it():
    entrypoint = (REPO / "docker" / "host-entrypoint.sh").read_text()
    found = workloads(render_objects(PRODUCTION, HOST_CHART))
    assert set(found) == {"web", "worker", "runner", "beat", "migrate", "edge"}
    for component, obj in found.items():
        (container,) = pod_of(obj)["containers"]
        assert container["args"][0] == component
        assert re.search(rf"^\s+{component}\)", entrypoint, re.MULTILINE), component
        assert container["image"] == PRODUCTION["image"]


# -- Pod Security restricted, no Kubernetes API ------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_pod_meets_pod_security_restricted(scenario):
    for component, obj in workloads(render_objects(SCENARIOS[scenario], HOST_CHART)).items():
        assert_pod_security_restricted(pod_of(obj))
        for container in pod_of(obj)["containers"]:
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/var/lib/forest", "/tmp"} <= mounts, (component, "the only writable paths")


def test_host_gets_no_kubernetes_api_access():
    """No Role or binding, no token in any pod, the accounts themselves refuse to mount one."""
    objects = render_objects(PRODUCTION, HOST_CHART)
    assert not {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Secret"} & {o["kind"] for o in objects}
    accounts = {obj["metadata"]["name"]: obj for obj in by_kind(objects, "ServiceAccount")}
    assert all(account["automountServiceAccountToken"] is False for account in accounts.values())
    for component, obj in workloads(objects).items():
        pod = pod_of(obj)
        assert pod["automountServiceAccountToken"] is False, component
        assert pod["serviceAccountName"] in accounts, component
        assert pod["serviceAccountName"] != "default", component


# -- probes on what Host really serves and writes ----------------------------------------------------------
def test_the_web_is_ready_on_healthz_and_alive_on_its_port():
    from django.urls import resolve

    from apps.core.views import healthz

    web = workloads(render_objects(PRODUCTION, HOST_CHART))["web"]
    assert web["spec"]["replicas"] >= 2
    (container,) = pod_of(web)["containers"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    ready, alive = container["readinessProbe"], container["livenessProbe"]
    assert resolve(ready["httpGet"]["path"]).func is healthz
    assert ready["httpGet"]["port"] == "http" and ports["http"] == int(container_env(container)["PORT"])
    # A database outage fails readiness; it must not restart every web (docs/deploy.md section 6).
    assert "httpGet" not in alive and alive["tcpSocket"]["port"] == "http"
    assert web["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_web_pdb_and_service_select_the_web_pods_only():
    objects = render_objects(PRODUCTION, HOST_CHART)
    found = workloads(objects)
    labels = found["web"]["spec"]["template"]["metadata"]["labels"]
    pdb = named(objects, "PodDisruptionBudget", "forest-host-web")
    selector = pdb["spec"]["selector"]["matchLabels"]
    assert selector.items() <= labels.items()
    for component, obj in found.items():
        if component != "web":
            assert not selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items(), component
    assert pdb["spec"]["maxUnavailable"] == 1 < found["web"]["spec"]["replicas"]
    service = named(objects, "Service", "forest-host-web")
    assert service["spec"]["selector"] == selector
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def _healthcheck():
    spec = importlib.util.spec_from_file_location("host_healthcheck", REPO / "docker" / "host-healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entrypoint_exec(role: str, extra: list[str]) -> list[str]:
    """The argv the image's entrypoint execs for `role` (PID 1 in the container), as the health check reads it."""
    body = re.search(rf"^\s+{role}\)\n(.*?)\n\s+;;", (REPO / "docker" / "host-entrypoint.sh").read_text(),
                     re.MULTILINE | re.DOTALL).group(1)
    (line,) = [line for line in re.sub(r"\\\n", " ", body).splitlines() if line.strip().startswith("exec ")]
    return shlex.split(line.replace('"$@"', "").replace('"', ""))[1:] + extra


@pytest.mark.parametrize("component", BACKGROUND)
def test_worker_runner_and_beat_are_alive_while_their_heartbeat_is_fresh(component):
    """The liveness probe is docker/host-healthcheck.py, and that script, reading the command the chart's
    args make the entrypoint exec, checks this process's heartbeat file (not "other": always healthy)."""
    obj = workloads(render_objects(PRODUCTION, HOST_CHART))[component]
    (container,) = pod_of(obj)["containers"]
    probe = container["livenessProbe"]
    assert probe["exec"]["command"] == ["python", "/app/docker/host-healthcheck.py"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 30
    assert _healthcheck().role(_entrypoint_exec(container["args"][0], container["args"][1:])) == component
    assert container_env(container)["FOREST_VAR_DIR"] == "/var/lib/forest"  # where the heartbeats are written


def test_deploy_md_shows_the_probe_the_chart_renders():
    """docs/deploy.md section 6 gives the worker/runner/beat probe for hand-written manifests: the chart's."""
    text = (REPO / "docs" / "deploy.md").read_text()
    (block,) = re.findall(r"```yaml\n(# Kubernetes: worker, runner and beat.*?)```", text, re.DOTALL)
    container = pod_of(workloads(render_objects(PRODUCTION, HOST_CHART))["beat"])["containers"][0]
    assert yaml.safe_load(block) == {"livenessProbe": container["livenessProbe"]}


def test_the_health_check_tells_the_processes_apart():
    healthcheck = _healthcheck()
    assert [healthcheck.role(_entrypoint_exec(r, [])) for r in ("web", "worker", "runner", "beat", "migrate")] == [
        "web", "worker", "runner", "beat", "other"]


# -- exactly one beat --------------------------------------------------------------------------------------
def test_beat_is_exactly_one_and_never_two_during_a_rollout():
    beat = workloads(render_objects(PRODUCTION, HOST_CHART))["beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_beat_has_no_replica_count_to_raise():
    refuse({**MINIMAL, "beat": {"replicas": 2, "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                            "limits": {"cpu": "1", "memory": "1Gi"}}}}, "replicas")


# -- the migrate hook --------------------------------------------------------------------------------------
def test_migrate_runs_once_before_install_and_every_upgrade():
    job = workloads(render_objects(PRODUCTION, HOST_CHART))["migrate"]
    annotations = job["metadata"]["annotations"]
    assert set(annotations[HOOK].split(",")) == {"pre-install", "pre-upgrade"}
    assert job["spec"]["backoffLimit"] == 0 and pod_of(job)["restartPolicy"] == "Never"
    assert pod_of(job)["containers"][0]["args"] == ["migrate"]


def test_the_migrate_hook_needs_nothing_the_release_has_not_made_yet():
    """A pre-install hook runs before the release's objects exist: what its pod names must be a hook object
    of lower weight, or the operator's own (the Secret)."""
    objects = render_objects(PRODUCTION, HOST_CHART)
    job = workloads(objects)["migrate"]
    hooks = {(o["kind"], o["metadata"]["name"]): int(o["metadata"]["annotations"].get("helm.sh/hook-weight", 0))
             for o in objects if HOOK in o["metadata"].get("annotations", {})}
    release_objects = {(o["kind"], o["metadata"]["name"]) for o in objects} - set(hooks)
    pod = pod_of(job)
    needed = {("ServiceAccount", pod["serviceAccountName"])}
    for container in pod["containers"]:
        for source in container.get("envFrom", []):
            needed |= {("Secret", source["secretRef"]["name"])} if "secretRef" in source else {
                ("ConfigMap", source["configMapRef"]["name"])}
        for item in container.get("env", []):
            for ref_kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in item.get("valueFrom", {}):
                    needed.add((ref_kind, item["valueFrom"][key]["name"]))
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} == {"emptyDir"}, volume
    job_weight = hooks[("Job", job["metadata"]["name"])]
    for ref in needed:
        assert ref not in release_objects, f"{ref} does not exist yet when the pre-install hook runs"
        if ref in hooks:
            assert hooks[ref] < job_weight, f"{ref} must be made before the Job"
    assert ("Secret", SECRET) in needed


def test_every_process_gets_the_same_settings_the_migration_ran_with():
    found = workloads(render_objects(PRODUCTION, HOST_CHART))
    expected_from = [{"secretRef": {"name": SECRET}}]
    shared = {**PRODUCTION["env"], "FOREST_VAR_DIR": "/var/lib/forest"}
    for component, obj in found.items():
        (container,) = pod_of(obj)["containers"]
        assert container["envFrom"] == expected_from, component
        env = container_env(container)
        assert {name: env[name] for name in shared} == shared, component


# -- Secrets referenced, never inlined ---------------------------------------------------------------------
@pytest.mark.parametrize("secret", ["SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "FOREST_METRICS_TOKEN",
                                    "FOREST_CAS_S3_SECRET_ACCESS_KEY"])
def test_secrets_cannot_be_given_as_plain_values(secret):
    refuse({**MINIMAL, "env": {secret: "postgres://forest:hunter2@db/forest"}}, secret)


def test_a_release_without_the_operators_secret_is_refused():
    with helm.Chart.load(HOST_CHART) as chart, pytest.raises(helm.HelmError, match="existingSecret"):
        chart.render({}, name="forest-host", namespace="forest")


def test_the_charts_settings_are_ones_host_reads():
    """Every name in the chart's env (its defaults, PRODUCTION's, and the ones it sets itself) is read by
    Host's settings, its liveness module or the image's entrypoint: a misspelt name would be ignored."""
    read = settings_host_reads()
    for component, obj in workloads(render_objects(PRODUCTION, HOST_CHART)).items():
        for name in container_env(pod_of(obj)["containers"][0]):
            assert name in read, (component, name)
    defaults = yaml.safe_load((HOST_CHART / "values.yaml").read_text())["env"]
    assert set(defaults) <= read


# -- the edge and its nginx --------------------------------------------------------------------------------
def test_the_edge_serves_its_nginx_on_unprivileged_ports_behind_80_and_443():
    objects = render_objects(PRODUCTION, HOST_CHART)
    edge = workloads(objects)["edge"]
    (container,) = pod_of(edge)["containers"]
    assert container["args"] == ["edge", "--serve"]
    from apps.ingress.management.commands.forest_edge import Command as Edge

    assert Edge().create_parser("manage.py", "forest_edge").parse_args(container["args"][1:]).serve
    env = container_env(container)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert (int(env["FOREST_EDGE_HTTP_LISTEN"]), int(env["FOREST_EDGE_HTTPS_LISTEN"])) == (ports["http"],
                                                                                           ports["https"])
    assert min(ports.values()) > 1024, "no NET_BIND_SERVICE: every capability is dropped"
    assert env["FOREST_EDGE_NGINX_PREFIX"].startswith("/var/lib/forest/")  # writable; the root is read-only
    service = named(objects, "Service", "forest-host-edge")
    assert {(p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {(80, "http"), (443, "https")}
    assert int(env["FOREST_EDGE_HTTPS_PORT"]) == 443  # what the HTTP -> HTTPS redirect names
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_of(edge)["volumes"]}
    assert volumes["edge-tls"]["secret"]["secretName"] == "forest-edge-tls"
    for variable, key in (("FOREST_EDGE_WILDCARD_CERT", "tls.crt"), ("FOREST_EDGE_WILDCARD_KEY", "tls.key")):
        assert env[variable] == f"{mounts['edge-tls']}/{key}"


def test_the_edge_is_off_until_asked_for_and_then_needs_its_certificate():
    assert "edge" not in workloads(render_objects(MINIMAL, HOST_CHART))
    refuse({**MINIMAL, "edge": {"enabled": True}}, "tlsSecret")


# -- NetworkPolicy -----------------------------------------------------------------------------------------
def test_every_pod_has_a_policy_and_only_the_web_and_edge_accept_connections():
    objects = render_objects(PRODUCTION, HOST_CHART)
    policies = by_kind(objects, "NetworkPolicy")
    for component, obj in workloads(objects).items():
        labels = obj["spec"]["template"]["metadata"]["labels"]
        (policy,) = [p for p in policies if p["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        open_ports = {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}
        container_ports = {port["containerPort"] for port in pod_of(obj)["containers"][0].get("ports", [])}
        assert open_ports == container_ports, component
        assert all(rule.get("ports") for rule in policy["spec"]["ingress"]), component
        egress = policy["spec"]["egress"]
        database = next(rule for rule in egress if rule.get("ports") == [{"protocol": "TCP", "port": 5432}])
        assert database["to"] == [{"ipBlock": {"cidr": "10.30.0.5/32"}}]
        unbounded = [rule for rule in egress if not rule.get("ports")]
        if component == "edge":
            assert [rule["to"] for rule in unbounded] == [[{"ipBlock": {"cidr": "10.0.0.0/8"}},
                                                           {"ipBlock": {"cidr": "100.64.0.0/10"}}]]
        else:
            assert not unbounded, component


def test_extra_egress_reaches_every_pod_and_stays_valid():
    minio = {"to": [{"ipBlock": {"cidr": "10.40.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 9000}]}
    objects = render_objects({**PRODUCTION, "networkPolicy": {"extraEgress": [minio]}}, HOST_CHART)
    policies = by_kind(objects, "NetworkPolicy")
    assert len(policies) == len(workloads(objects))
    for policy in policies:
        assert minio in policy["spec"]["egress"]
        schema_validate(policy, version=KUBERNETES_VERSION)


# -- values.schema.json ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, field", [
    ({"web": {"replicas": 1}}, "replicas"),
    ({"image": "registry.example.com/forest/forest-host"}, "image"),
    ({"replicaCount": 2}, "replicaCount"),
    ({"env": {"allowed_hosts": "x"}}, "allowed_hosts"),
    ({"env": {"PORT": "9000"}}, "PORT"),
    ({"env": {"FOREST_CAS_GC_GRACE_S": 60}}, "FOREST_CAS_GC_GRACE_S"),
    ({"networkPolicy": {"database": {"cidrs": ["db.example.com"], "ports": [5432]}}}, "cidrs"),
    ({"existingSecret": "Forest_Secrets"}, "existingSecret"),
])
def test_values_schema_refuses_bad_values(bad, field):
    refuse({**MINIMAL, **bad}, field)  # Helm merges them over the chart's defaults first
