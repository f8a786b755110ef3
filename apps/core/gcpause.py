"""``collection_paused``: the cyclic garbage collector held off while a bulk step allocates.

A batch (5,000 decisions, a 1.7 MB body parsed) allocates hundreds of thousands of small objects, almost
none in reference cycles (reference counting frees them). Each allocation burst triggers the cyclic
collector, whose older generations walk every live object, the fleet snapshot's included: a third of a
batch's decision time was the collector's (docs/decisions.md "C1M speed"). Held off for the step and
restored after it; what cycles the step left are collected at the next collection as usual.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOCK = threading.Lock()
_holders = 0  # blocks inside collection_paused, every thread's
_was_enabled = False  # the collector's state when the first of them entered


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside the block. Process-wide and counted across threads (a web process runs
    two batches at once on its thread pool): the collector goes off when the first block enters and comes
    back, as it was before that, when the last one leaves, so one batch ending never turns it on under
    another; a caller that had it off keeps it off."""
    global _holders, _was_enabled
    with _LOCK:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _LOCK:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
