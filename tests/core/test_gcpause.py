"""apps.core.gcpause: the collector is off inside the block and as it was after it, errors included."""
from __future__ import annotations

import gc

import pytest

from apps.core.gcpause import collection_paused


def test_the_collector_is_held_off_and_restored():
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collection_paused():
        assert not gc.isenabled()
        with collection_paused():  # an inner block leaves it off for the outer one
            assert not gc.isenabled()
        assert not gc.isenabled()
        raise RuntimeError("the block failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_overlapping_blocks_on_two_threads_keep_it_off_until_the_last_leaves():
    """Two batches on one web process's thread pool: the first to finish must not turn the collector back on
    under the other (restoring "as it was" per block did), and the last to leave restores it."""
    import threading

    first_inside, second_inside, first_left = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first():
        with collection_paused():
            first_inside.set()
            assert second_inside.wait(timeout=30)
        first_left.set()

    def second():
        assert first_inside.wait(timeout=30)
        with collection_paused():
            second_inside.set()
            assert first_left.wait(timeout=30)
            seen["inside_after_first_left"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert seen == {"inside_after_first_left": False}
    assert gc.isenabled()


def test_what_a_step_leaves_alive_is_frozen_and_a_cycle_in_it_collected_within_unfreeze_every_steps(monkeypatch):
    """The objects alive when the last block ends are frozen (no collection walks them; reference counting
    still frees them); every ``UNFREEZE_EVERY``-th step returns them to the collector, so a reference cycle
    a step left behind is collected within that many steps."""
    import weakref

    from apps.core import gcpause

    class Node:
        pass

    monkeypatch.setattr(gcpause, "UNFREEZE_EVERY", 3)
    monkeypatch.setattr(gcpause, "_steps", 0)
    try:
        with collection_paused():
            cycle = Node()
            cycle.me = cycle
            alive = weakref.ref(cycle)
            plain = Node()
            freed = weakref.ref(plain)
        del cycle, plain
        assert freed() is None  # no cycle: reference counting freed it, frozen or not
        gc.collect()
        assert alive() is not None and gc.get_freeze_count() > 0  # frozen: not collected yet
        with collection_paused():
            pass
        gc.collect()
        assert alive() is not None
        with collection_paused():  # the third step: the frozen objects go back to the collector
            pass
        gc.collect()
        assert alive() is None
    finally:
        gc.unfreeze()
