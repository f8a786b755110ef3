"""``collection_paused``: the cyclic garbage collector held off while a bulk step allocates.

A batch (5,000 decisions, a 1.7 MB body parsed) allocates hundreds of thousands of small objects, almost
none in reference cycles (reference counting frees them). Each allocation burst triggers the cyclic
collector, whose older generations walk every live object, the fleet snapshot's included: a third of a
batch's decision time was the collector's (docs/decisions.md "C1M speed"). Held off for the step and
restored after it.

What the step leaves alive when it ends (a web request's parsed body and its results, until the response
is sent) is frozen (``gc.freeze``) before the collector comes back: otherwise the first allocation after
it paid for a walk of all of it (a tenth of the batch endpoint's CPU, measured with py-spy on the
running server). Frozen objects are still freed by reference counting as usual; only a reference cycle
among them waits, until every ``UNFREEZE_EVERY``-th step returns the frozen objects to the collector.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Every this many steps, the objects earlier steps froze go back to the collector's oldest generation, so a
# cycle a step left behind is collected within that many steps.
UNFREEZE_EVERY = 50
_LOCK = threading.Lock()
_holders = 0  # blocks inside collection_paused, every thread's
_was_enabled = False  # the collector's state when the first of them entered
_steps = 0  # steps ended since the frozen objects were last returned


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside the block. Process-wide and counted across threads (a web process runs
    two batches at once on its thread pool): the collector goes off when the first block enters and comes
    back, as it was before that, when the last one leaves, so one batch ending never turns it on under
    another; a caller that had it off keeps it off."""
    global _holders, _was_enabled, _steps
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
                _steps += 1
                if _steps >= UNFREEZE_EVERY:
                    _steps = 0
                    gc.unfreeze()
                else:
                    gc.freeze()
                gc.enable()
