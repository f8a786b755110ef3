"""The chart's container, as rendered, runs: `forest-controller` started with the Deployment's own
arguments and environment (only `--in-cluster` swapped for a kubeconfig of the fake API server), against
the fake API server and the stub Host. It enrolls into the empty identity Secret, leads, runs a trusted job,
an untrusted job and a Deployment, and honours a cancellation; then **every request it made is checked
against the rendered RBAC** with Kubernetes' own rule matching (verb, API group, resource, subresource,
namespace, resourceName). Least privilege that is not enough fails here; too much fails the allow-list.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import NAMESPACE, STANDALONE, render_objects

AGENT_TESTS = Path(__file__).resolve().parents[2] / "agent" / "tests"
sys.path.insert(0, str(AGENT_TESTS))

from kube_fake import FakeKube, Kubelet  # noqa: E402
from stub_host import StubHost  # noqa: E402
from test_kube_controller import k8s_job  # noqa: E402

CONTROLLER = [sys.executable, "-c", "import sys; from forest_agent.kube.cli import main; sys.exit(main())"]


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube().start()
    server.add_node("node-1")
    yield server
    server.stop()


@pytest.fixture
def host() -> Iterator[StubHost]:
    server = StubHost().start()
    yield server
    server.stop()


def request_attributes(
    method: str, path: str, query: dict[str, str], content_type: str
) -> tuple[list[str], str, str, str, str]:
    """(verbs, apiGroup, resource[/subresource], namespace, name) as the API server's authorizer sees them."""
    match = re.fullmatch(r"/(?:api/v1|apis/([^/]+)/[^/]+)(?:/namespaces/([^/]+))?/([^/]+)(?:/([^/]+))?(?:/([^/]+))?",
                         path)
    assert match, path
    group, namespace, resource, name, sub = match.groups()
    if resource == "namespaces" and namespace is None and name:
        namespace = ""
    resource = f"{resource}/{sub}" if sub else resource
    name = name or ""
    if method == "GET":
        verbs = ["get"] if name else (["watch"] if query.get("watch") in ("true", "1") else ["list"])
    elif method == "PATCH":
        # Server-side apply may create the object; the API server then also checks create.
        verbs = ["patch", "create"] if content_type.startswith("application/apply-patch") else ["patch"]
    else:
        verbs = {"POST": ["create"], "PUT": ["update"], "DELETE": ["delete"]}[method]
    return verbs, group or "", resource, namespace or "", name


def allowed(rules_by_scope: list[tuple[str | None, dict[str, Any]]], verb: str, group: str, resource: str,
            namespace: str, name: str) -> bool:
    for scope, rule in rules_by_scope:
        if scope is not None and scope != namespace:
            continue  # a Role grants only in its own namespace; a ClusterRole (scope None) everywhere
        if (group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
                and (not rule.get("resourceNames") or (name and name in rule["resourceNames"]))):
            return True
    return False


def test_the_rendered_controller_runs_and_its_rbac_covers_every_request(fake, host, tmp_path):
    objects = render_objects(STANDALONE)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    # The cluster as the chart leaves it: its namespaces, policy and the empty identity Secret.
    for obj in objects:
        if obj["kind"] in ("Namespace", "NetworkPolicy") or (obj["kind"] == "Secret" and "data" not in obj):
            fake.put(obj["kind"], obj)
    host.tokens = {STANDALONE["enrollmentToken"]}
    token_file = tmp_path / "enrollment" / "token"
    token_file.parent.mkdir()
    token_file.write_text(STANDALONE["enrollmentToken"])
    env = {**os.environ, "POD_NAME": "forest-controller-abc12", "POD_NAMESPACE": NAMESPACE,
           "FOREST_HOST_URL": host.url, "FOREST_GROVE_NAME": STANDALONE["config"]["groveName"],
           "FOREST_CONTROLLER_LOG_LEVEL": "info"}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["args"]]
    args = [arg for arg in args if arg != "--in-cluster"]
    args = [f"--token-file={token_file}" if arg.startswith("--token-file=") else arg for arg in args]
    args += ["--kubeconfig", str(fake.kubeconfig(tmp_path)), "--heartbeat-interval", "0.5", "--poll-wait", "1",
             "--watch-timeout", "2", "--pending-grace", "0"]
    kubelet = Kubelet(fake).auto()
    log = (tmp_path / "controller.log").open("w+")
    proc = subprocess.Popen([*CONTROLLER, *args], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        trusted, untrusted = k8s_job(1), k8s_job(2, trust="untrusted")
        service = k8s_job(3, change_kind="k8s.deployment", command=[], ports=[{"name": "http", "port": 8080}])
        service["node"] = service["payload"]["node"] = "web"
        for job in (trusted, untrusted, service):
            host.add_job(job)
        assert host.terminal_report(trusted["job_id"], timeout=60)["state"] == "succeeded"
        assert host.terminal_report(untrusted["job_id"], timeout=60)["state"] == "succeeded"
        assert host.terminal_report(service["job_id"], timeout=60)["state"] == "succeeded"
        assert fake.get("Service", "forest", "web") is not None
        kubelet.stop()
        doomed = k8s_job(4, command=[sys.executable, "-c", "import time; time.sleep(60)"])
        host.add_job(doomed)
        host.wait_for(lambda: fake.list("Job", f"forest.dev/job-id={doomed['job_id']}"), timeout=60,
                      what="the job to cancel")
        host.cancel(doomed["job_id"])
        assert host.terminal_report(doomed["job_id"], timeout=60)["state"] == "cancelled"
        assert len(host.enrollments) == 1
    finally:
        kubelet.stop()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        log.seek(0)
        output = log.read()
        log.close()
    assert code == 0, output
    assert not fake.get("Lease", NAMESPACE, "forest-controller")["spec"].get("holderIdentity")  # released

    rules = [(o["metadata"]["namespace"] if o["kind"] == "Role" else None, rule)
             for o in objects if o["kind"] in ("Role", "ClusterRole") for rule in o["rules"]]
    denied = set()
    for request in fake.requests:
        verbs, group, resource, namespace, name = request_attributes(
            request.method, request.path, request.query, request.content_type
        )
        for verb in verbs:
            if not allowed(rules, verb, group, resource, namespace, name):
                denied.add((verb, group or "core", resource, namespace or "(cluster)", name))
    assert not denied, f"the chart's RBAC would refuse: {sorted(denied)}\n{output}"
    assert {r.path for r in fake.requests if "/namespaces/" not in r.path} <= {"/api/v1/nodes", "/api/v1/pods"}
