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
