"""Migration ``workloads 0003`` on PostgreSQL: existing secrets stay team-less rows (team-less workloads keep
reading them), each team whose workloads already named one gets its own copy of it, no other team gets
one, and going back leaves the rows that were there before."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.artifacts.models import Artifact

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("workloads", "0002_ingress_hostname")]
AFTER = [("workloads", "0003_workload_secret_team")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_existing_secrets_stay_and_only_referencing_teams_get_a_copy():
    old = _migrate(BEFORE)
    try:
        Secret, Workload = old.get_model("workloads", "WorkloadSecret"), old.get_model("workloads", "NativeWorkload")
        # Only workloads goes back: the artifacts table is the current one, so its row is made by today's model.
        digest = "sha256:" + "0" * 64
        bundle = Artifact.objects.create(digest=digest, storage_kind="cas", reference=digest)
        for environment, name, value in (("prod", "API_TOKEN", b"c1"), ("prod", "DB_URL", b"c2"),
                                         ("dev", "API_TOKEN", b"c3")):
            Secret.objects.create(environment=environment, name=name, ciphertext=value)
        for slug, team, environment, refs in (("red-web", "red", "prod", ["API_TOKEN"]),
                                              ("blue-web", "blue", "dev", ["API_TOKEN", "NOT_SET"]),
                                              ("shared", "", "prod", ["DB_URL"])):
            Workload.objects.create(slug=slug, team=team, environment=environment, bundle_id=bundle.pk,
                                    command=["./x"], secret_refs=refs)

        new = _migrate(AFTER)
        rows = {(r.team, r.environment, r.name): bytes(r.ciphertext)
                for r in new.get_model("workloads", "WorkloadSecret").objects.all()}
        assert rows == {("", "prod", "API_TOKEN"): b"c1", ("", "prod", "DB_URL"): b"c2",
                        ("", "dev", "API_TOKEN"): b"c3",
                        ("red", "prod", "API_TOKEN"): b"c1", ("blue", "dev", "API_TOKEN"): b"c3"}

        back = _migrate(BEFORE)
        assert {(r.environment, r.name) for r in back.get_model("workloads", "WorkloadSecret").objects.all()} == {
            ("prod", "API_TOKEN"), ("prod", "DB_URL"), ("dev", "API_TOKEN")}
    finally:
        _migrate(AFTER)
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
