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
