"""Two teams' worth of work (compute jobs, pipeline runs, native workloads, placements) and one user per
role in team ``red``: the permission matrix and the hostile corpus both run against it. Registered for
every test through ``pytest_plugins`` in tests/conftest.py."""
from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rest_framework.test import APIClient

from apps.accounts import roles
from apps.artifacts.services import artifact_blob_create
from apps.compute.services import compute_job_submit
from apps.flags.services import flag_override_set
from apps.pipelines.rules import node_requirement
from apps.pipelines.services import pipeline_run_create
from apps.placement.services import place_execution
from apps.workloads import services as workloads
from tests.factories import UserFactory, api_token_for, grant
from tests.pipelines.graphs import IMAGE, exec_node, graph

TEAMS = ("red", "blue")
ROLE_USERS = {"nobody": (), "viewer": (roles.VIEWER,), "submitter": (roles.SUBMITTER,),
              "operator": (roles.WORKLOAD_OPERATOR,), "admin": (roles.STAFF_ADMIN,)}


def client_for(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_for(user)}")
    return client


@pytest.fixture
def users(db):
    """One user per role, each a member of team ``red`` only (the admin too: it reaches blue by role)."""
    return {name: grant(UserFactory(username=f"{name}-user", is_staff=False), *granted, teams=("red",))
            for name, granted in ROLE_USERS.items()}


PREVIEW = {"family": "build", "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["ci"]},
                                               "artifact_kind": "oci_image", "change_kind": "k8s.build_job",
                                               "isolation": "container"}}


def compute_body(team: str, name: str = "train") -> dict:
    return {"name": name, "team": team, "steps": [{"name": "s", "kind": "container", "image": IMAGE,
                                                   "command": ["python", "-c", "1"]}]}


def run_body(team: str) -> dict:
    return {"kind": "compute", "team": team, "graph": graph(exec_node("a"))}


@pytest.fixture
def bundle(db):
    data = b"pretend this is a tar.gz bundle"
    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
    signature = base64.b64encode(Ed25519PrivateKey.generate().sign(digest.encode())).decode()
    return artifact_blob_create(chunks=[data], expected_digest=digest, signature=signature, signing_key_id="release")


def workload_body(bundle, team: str, slug: str) -> dict:
    return {"slug": slug, "team": team, "bundle_digest": bundle.digest, "command": ["./server"]}


@pytest.fixture
def estate(db, settings, fresh_grove, bundle):
    """Per team: a compute job, a pipeline run, a native workload and a placement, written as a staff admin
    would (through the services)."""
    flag_override_set(name="host.deploy.forest_compute_jobs", enabled=True, reason="test estate")
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    fresh_grove(name="kube", substrate="kubernetes", roles=("compute", "build"))
    fresh_grove(name="mac", roles=("runtime", "compute"), platforms=("darwin/arm64",),
                change_kinds=["native.job", "native.workload"])
    requirement = node_requirement(
        {"id": "n", "kind": "exec", "runtime": "container", "image": IMAGE, "command": ["true"],
         "platform": ["linux/amd64"]}, run_kind="compute")
    out = {}
    for team in TEAMS:
        out[team] = {
            "job": compute_job_submit(body=compute_body(team)),
            "job_to_cancel": compute_job_submit(body=compute_body(team, "other")),
            "run": pipeline_run_create(graph=graph(exec_node("a")), kind="compute", team=team),
            "workload": workloads.native_workload_apply(body=workload_body(bundle, team, f"web-{team}"))[0],
            "placement": place_execution(subject_type="pipeline_node", subject_id=f"p-{team}",
                                         requirement=requirement, team=team).placement,
        }
    return out
