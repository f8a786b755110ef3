"""Two concurrent claims for the last free GPU on real PostgreSQL: exactly one wins."""
from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from apps.accelerators import rules, selectors, services
from apps.accelerators.models import AcceleratorClaim
from apps.core.errors import ForestError
from apps.flags import services as flags
from apps.pipelines.rules import node_requirement
from tests.factories import entitlement, nvidia_gpu, unit
from tests.placement.conftest import grove_make


def _race(grove, requirement, refs, team=None):
    barrier = threading.Barrier(len(refs))
    won, refused, errors = [], [], []

    def claim(ref):
        try:
            barrier.wait(timeout=10)
            won.append(services.accelerator_claim(grove=grove, requirement=requirement, job_ref=ref, team=team))
        except ForestError as exc:
            refused.append(exc.code)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(ref,)) for ref in refs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return won, refused, errors


def _gpu_grove(name, gpus):
    devices = [nvidia_gpu(f"GPU-{i}") for i in range(gpus)]
    return grove_make(name, roles=("compute",), units=[unit("n", accelerators=[
        {"inventory_id": d["id"], "allocatable": 1, "free": 1} for d in devices])], accelerators=devices)


REQ = node_requirement({"id": "t", "kind": "exec", "accelerators": {"count": 1, "vendor": "nvidia"}},
                                      run_kind="compute")


@pytest.fixture
def slow_admission(monkeypatch):
    """Widen the race window: every claimer pauses after reading the claims and before writing its own.
    Without the row locks both would read 'free' and both would win; with them the second waits."""
    real_admit, real_active = rules.admit, selectors.active_count

    def admit(*args, **kwargs):
        result = real_admit(*args, **kwargs)
        time.sleep(0.3)
        return result

    def active_count(*args, **kwargs):
        result = real_active(*args, **kwargs)
        time.sleep(0.3)
        return result

    monkeypatch.setattr(rules, "admit", admit)
    monkeypatch.setattr(selectors, "active_count", active_count)


@pytest.mark.django_db(transaction=True)
def test_two_claims_for_the_last_unit_cannot_both_win(slow_admission):
    grove = _gpu_grove("gpu", 1)
    won, refused, errors = _race(grove, REQ, [f"job-{i}" for i in range(4)])
    assert not errors
    assert len(won) == 1 and refused == ["accelerator_unavailable"] * 3
    assert AcceleratorClaim.objects.filter(state="active").count() == 1


@pytest.mark.django_db(transaction=True)
def test_team_concurrency_is_serialised_across_groves(slow_admission):
    flags.flag_override_set(name="host.accelerators.policy", enabled=True, reason="t")
    entitlement(team="ml", api="cuda", max_concurrent=1)
    groves = [_gpu_grove("gpu-a", 1), _gpu_grove("gpu-b", 1)]
    barrier = threading.Barrier(2)
    outcomes, errors = [], []

    def claim(grove, ref):
        try:
            barrier.wait(timeout=10)
            services.accelerator_claim(grove=grove, requirement=REQ, job_ref=ref, team="ml")
            outcomes.append("won")
        except ForestError as exc:
            outcomes.append(exc.code)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=claim, args=(g, f"j-{g.slug}")) for g in groves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors and sorted(outcomes) == ["over_concurrency", "won"]
