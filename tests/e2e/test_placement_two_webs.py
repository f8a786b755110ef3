"""Two real Host web processes (uvicorn, as bench/ha.py starts them) place concurrently through
``POST placements/batch`` on a fleet with scarce capacity, each deciding from its own in-process snapshot
(refreshed only every minute, so each is blind to the other's placements until its write re-verifies).
Counted from the database afterwards: no unit holds more than its reported free CPU and memory, and no
subject has two placements (nor two different answers)."""
from __future__ import annotations

import os
import threading
from collections import defaultdict

import httpx
import pytest

from apps.groves.models import PlacementUnit
from apps.placement.models import ExecutionPlacement
from bench.ha import Cluster, Proc, free_port
from tests.console import console_script
from tests.factories import GIB, UserFactory, api_token_for, unit
from tests.pipelines.conftest import _test_database_url
from tests.placement.conftest import grove_make

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.e2e]
REQUIREMENT = {"family": "build", "resources": {"cpu_milli": 1000, "memory_bytes": GIB},
               "compatibility": {"platform": {"allowed": ["linux/amd64"], "sources": ["ci"]},
                                 "artifact_kind": "oci_image", "change_kind": "k8s.job", "isolation": "container"}}


def test_two_webs_never_overcommit_nor_place_a_subject_twice(tmp_path):
    for name, cpus in (("a", 4), ("b", 3), ("c", 2)):
        grove_make(name, units=[unit(f"{name}-0", cpu=8000, free_cpu=cpus * 1000, mem_gib=64)])
    grove_make("d", units=[unit("d-0", cpu=8000, free_cpu=1000, mem_gib=64), unit("d-1", cpu=8000, free_cpu=2000,
                                                                               mem_gib=64)])
    capacity = 4 + 3 + 2 + 1 + 2
    token = api_token_for(UserFactory(is_staff=True, is_superuser=True), "two-webs")
    env = {**os.environ, "DATABASE_URL": _test_database_url(), "DJANGO_SETTINGS_MODULE": "tests.settings",
           "PLACEMENT_FLEET_REFRESH_S": "60", "FLAGS_CACHE_TTL_S": "0", "LOG_LEVEL": "WARNING",
           "FOREST_VAR_DIR": str(tmp_path), "DATABASE_POOL_MAX_SIZE": "3", "DATABASE_POOL_ASYNC_SIZE": "2"}
    cluster = Cluster(env=env, log_dir=tmp_path)
    for i in range(2):
        port = free_port()
        cluster.urls.append(f"http://127.0.0.1:{port}")
        cluster.webs.append(Proc(f"web{i}", [console_script("uvicorn"), "forest_host.asgi:application",
                                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
                                             "--no-access-log"], env, tmp_path).start())
    headers = {"Authorization": f"Token {token}"}
    try:
        for url in cluster.urls:
            _wait_up(url)
            # Each web loads its snapshot now, with every unit free: from here on it decides blind.
            preview = httpx.post(f"{url}/api/forest/v1/placements/preview", json=REQUIREMENT, headers=headers,
                                 timeout=30)
            assert preview.status_code == 200, preview.text
        answers: dict[str, set] = defaultdict(set)
        statuses: list[str] = []
        lock = threading.Lock()
        start = threading.Barrier(4)

        def place(url: str, caller: str) -> None:
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                start.wait()
                for round_ in range(4):
                    # Each caller's own subjects, and subjects every caller of both webs asks for.
                    subjects = [f"{caller}-{round_}-{n}" for n in range(3)] + [f"shared-{round_}-{n}" for n in range(2)]
                    items = [{"subject_type": "pipeline_node", "subject_id": subject, "requirement": REQUIREMENT}
                             for subject in subjects]
                    response = client.post("/api/forest/v1/placements/batch", json={"items": items})
                    assert response.status_code == 200, response.text
                    with lock:
                        for result in response.json()["results"]:
                            statuses.append(result.get("error", {}).get("code", result["status"]))
                            if result["status"] != "error":
                                answers[result["subject_id"]].add(result["placement_id"])

        threads = [threading.Thread(target=place, args=(url, f"w{i}t{t}")) for i, url in enumerate(cluster.urls)
                   for t in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads)
    finally:
        cluster.stop()
    logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*.log"))
    assert set(statuses) <= {"placed", "reused", "no_capacity", "fleet_changed"}, (statuses, logs)
    # Counted from the database: 12 CPUs of room; 56 distinct subjects of 1 CPU asked for (4 callers x 4
    # rounds x 3 of their own, and 2 a round every caller asks for), so the room runs out. Without the
    # write's re-verification each web fills the fleet its snapshot shows (20+ rows here).
    rows = list(ExecutionPlacement.objects.all())
    assert 0 < len(rows) <= capacity, len(rows)
    assert len({(row.subject_type, row.subject_id) for row in rows}) == len(rows)
    used: dict[tuple, int] = defaultdict(int)
    for row in rows:
        used[(str(row.grove_id), row.decision["unit"])] += row.requirement["resources"]["cpu_milli"]
    free = {(str(u.grove_id), u.unit_id): u.cpu_milli_free for u in PlacementUnit.objects.all()}
    for key, cpu in used.items():
        assert cpu <= free[key], (key, cpu, free[key])
    # Every answer a web gave for a subject is the one stored placement.
    stored = {row.subject_id: row.pk for row in rows}
    for subject, ids in answers.items():
        assert ids == {stored[subject]}, (subject, ids)
    assert statuses.count("placed") == len(rows)


def _wait_up(url: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/healthz", timeout=1)
            return
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"web at {url} did not come up"
            time.sleep(0.2)
