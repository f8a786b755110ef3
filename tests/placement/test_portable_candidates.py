"""The Python candidate selection used on SQLite (``make run``) must agree with the PostgreSQL query."""
from __future__ import annotations

import pytest

from apps.placement.derivation import requirement_for_node
from apps.placement.selectors import _candidates_portable, candidates

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("node", [
    {"id": "n", "kind": "exec", "runtime": "native", "command": ["true"], "platform": ["linux/amd64"]},
    {"id": "n", "kind": "exec", "runtime": "container", "image": "a/b@sha256:" + "a" * 64, "command": ["true"],
     "platform": ["linux/arm64", "linux/amd64"]},
    {"id": "n", "kind": "exec", "runtime": "native", "command": ["true"], "platform": ["darwin/arm64"],
     "accelerators": {"count": 1, "vendor": "apple"}},
    {"id": "n", "kind": "exec", "runtime": "container", "image": "a/b@sha256:" + "a" * 64, "command": ["true"],
     "resources": {"cpu_milli": 12000, "memory_bytes": 1 << 30}},
])
@pytest.mark.parametrize("role_only", [False, True])
def test_portable_selection_matches_postgresql(fresh_grove, node, role_only):
    fresh_grove(name="k8s-amd", substrate="kubernetes", roles=("compute",), platforms=("linux/amd64", "linux/arm64"),
                change_kinds=["k8s.job"])
    fresh_grove(name="k8s-arm", substrate="kubernetes", roles=("compute",), platforms=("linux/arm64",),
                change_kinds=["k8s.job"])
    fresh_grove(name="gpu-box", roles=("compute",), gpus=2)
    fresh_grove(name="mac", roles=("compute", "build"), platforms=("darwin/arm64",))
    fresh_grove(name="builder", substrate="kubernetes", roles=("build",), change_kinds=["k8s.build_job"])
    requirement = requirement_for_node(node, run_kind="compute")
    sql = candidates(requirement, limit=20, role_only=role_only)
    py = _candidates_portable(requirement, limit=20, role_only=role_only)
    assert [(c.slug, c.platform_rank, c.fits_cpu_memory) for c in py.eligible] == [
        (c.slug, c.platform_rank, c.fits_cpu_memory) for c in sql.eligible]
    assert [c.slug for c in py.others] == [c.slug for c in sql.others]
    assert (py.eligible_total, py.ineligible_total) == (sql.eligible_total, sql.ineligible_total)
