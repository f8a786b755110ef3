"""The observed lifecycle of a workload generation, as one transition table. Pure: no Django.

The agent reports states; Host accepts only transitions this table allows. ``superseded`` is final:
a newer generation of the same workload went live (or an operator replaced it).
"""
from __future__ import annotations

from apps.core.lifecycle import Lifecycle
from apps.workloads.vocabulary import GenerationState as G

_RUNNING_STATES = {G.STARTING, G.LIVE, G.CRASH_LOOP, G.FAILED, G.STOPPED, G.SUPERSEDED}
GENERATION = Lifecycle.of("generation", {
    G.PENDING: _RUNNING_STATES,
    G.STARTING: _RUNNING_STATES,
    G.LIVE: _RUNNING_STATES,
    G.CRASH_LOOP: _RUNNING_STATES,
    G.FAILED: _RUNNING_STATES,
    G.STOPPED: {G.STARTING, G.STOPPED, G.SUPERSEDED},
    G.SUPERSEDED: set(),
}, column="state", stamps={state: "observed_at" for state in G}, refusals={
    G.SUPERSEDED: ("generation_superseded",
                   "This generation was superseded by a newer one; stop it and report the live one."),
})
