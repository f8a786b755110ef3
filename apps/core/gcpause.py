"""``collection_paused``: the cyclic garbage collector held off while a bulk step allocates.

A batch (5,000 decisions, a 1.7 MB body parsed) allocates hundreds of thousands of small objects, almost
none in reference cycles (reference counting frees them). Each allocation burst triggers the cyclic
collector, whose older generations walk every live object, the fleet snapshot's included: a third of a
batch's decision time was the collector's (docs/decisions.md "C1M speed"). Held off for the step and
restored after it; what cycles the step left are collected at the next collection as usual.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collection_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state before it is restored after it (a
    caller that had it off, or an enclosing block, keeps it off). Process-wide: another thread's work in
    the meantime runs without it too, which only delays a collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
