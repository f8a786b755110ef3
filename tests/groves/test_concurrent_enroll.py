"""Issue 33, every name another Grove could also pick: over real HTTP against a live Host, two enrollments
of one name at the same moment both succeed with two slugs (a lock on the slug's base), never a 500."""
from __future__ import annotations

import threading

import httpx
import pytest

from apps.groves.models import Grove
from apps.groves.services import enrollment_token_create

V1 = "/api/forest/v1"


@pytest.mark.django_db(transaction=True)
def test_two_enrollments_of_one_name_at_once_both_succeed(live_server):
    """Every name another Grove could also pick: two agents enrolling as "rack box" at the same moment get
    two slugs, never a 500 from the unique slug."""
    tokens = [enrollment_token_create(roles=["compute"], substrate="native")[1] for _ in range(2)]
    barrier, answers = threading.Barrier(2), []

    def enroll(token: str) -> None:
        barrier.wait(timeout=30)
        answers.append(httpx.post(f"{live_server.url}{V1}/groves/enroll", timeout=60, json={
            "token": token, "name": "rack box", "substrate": "native", "platforms": ["linux/amd64"],
            "version": "1"}))

    threads = [threading.Thread(target=enroll, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert sorted(answer.status_code for answer in answers) == [201, 201], [a.text for a in answers]
    slugs = sorted(Grove.objects.values_list("slug", flat=True))
    assert len(set(slugs)) == 2 and slugs[0] == "rack-box" and slugs[1].startswith("rack-box-")
