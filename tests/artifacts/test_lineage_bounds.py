"""Lineage reads are bounded (apps/artifacts/selectors.py): at most ``MAX_LINEAGE_DEPTH`` hops each way
whatever depth a caller asks for, and at most ``MAX_LINEAGE_ROWS`` rows, with ``truncated`` saying a bound cut
the answer. Each test builds more than the bound allows, so it fails if that bound is lifted."""
from __future__ import annotations

import uuid

import pytest

from apps.artifacts.models import ArtifactUse
from apps.artifacts.vocabulary import MAX_LINEAGE_DEPTH, MAX_LINEAGE_ROWS
from tests.artifacts.conftest import V1
from tests.artifacts.test_inputs import _produce

pytestmark = pytest.mark.django_db


def test_a_deeper_ask_than_the_cap_is_answered_at_the_cap(staff_client):
    """A chain of MAX_LINEAGE_DEPTH + 3 steps above and below the middle artifact; ``depth=50`` is served
    as MAX_LINEAGE_DEPTH hops each way, and the steps beyond are left out and flagged."""
    length = 2 * (MAX_LINEAGE_DEPTH + 3) + 1
    runs = [str(uuid.uuid4()) for _ in range(length)]
    chain = [_produce(runs[0], "s", b"0")]
    for index in range(1, length):
        chain.append(_produce(runs[index], "s", str(index).encode(), inputs=[chain[-1]]))
    middle = length // 2

    body = staff_client.get(f"{V1}/artifacts/{chain[middle].pk}/lineage?depth=50").json()
    assert body["depth"] == MAX_LINEAGE_DEPTH
    steps = {edge["step"] for edge in body["edges"]}
    # Upstream: the middle's producer and MAX_LINEAGE_DEPTH - 1 producers above it; downstream the mirror.
    reach = range(middle - (MAX_LINEAGE_DEPTH - 1), middle + MAX_LINEAGE_DEPTH + 1)
    assert steps == {f"{runs[index]}:s" for index in reach}
    assert body["truncated"] is True


def test_an_artifact_used_more_often_than_the_row_bound_is_cut_at_the_bound(staff_client):
    common = _produce(str(uuid.uuid4()), "base", b"base")
    ArtifactUse.objects.bulk_create([ArtifactUse(artifact=common, run_id=uuid.uuid4(), node="use", role="input",
                                                 name="in0") for _ in range(MAX_LINEAGE_ROWS + 20)])
    body = staff_client.get(f"{V1}/artifacts/{common.pk}/lineage").json()
    assert len(body["edges"]) == MAX_LINEAGE_ROWS and body["truncated"] is True
    assert len(body["producers"]) + len(body["consumers"]) == MAX_LINEAGE_ROWS


def test_a_run_with_more_uses_than_the_row_bound_lists_the_bound(staff_client):
    run_id = uuid.uuid4()
    common = _produce(str(uuid.uuid4()), "base", b"base")
    ArtifactUse.objects.bulk_create([ArtifactUse(artifact=common, run_id=run_id, node=f"n{index}", role="input",
                                                 name="in0") for index in range(MAX_LINEAGE_ROWS + 20)])
    body = staff_client.get(f"{V1}/artifacts/runs/{run_id}/lineage").json()
    assert len(body["inputs"]) + len(body["outputs"]) == MAX_LINEAGE_ROWS
