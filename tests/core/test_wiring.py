"""docs/architecture.md "Events and subscribers" is what is registered: no more, no fewer, in that order."""
from __future__ import annotations

import re
from pathlib import Path

from django.core.signals import got_request_exception

from apps.accelerators import hooks as accelerator_hooks
from apps.artifacts import hooks as artifact_hooks
from apps.core.lifecycle import Lifecycle
from apps.dispatch import hooks as dispatch_hooks
from apps.groves import hooks as grove_hooks

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `(?P<source>[^`]+)` (?P<event>[a-z_]+)\b[^|]*\| `(?P<subscriber>[^`]+)` \|$")


def _documented() -> list[tuple[str, str, str]]:
    section = DOC.read_text().split("## Events and subscribers", 1)[1].split("\n## ", 1)[0]
    rows = [_ROW.match(line.strip()) for line in section.splitlines() if line.startswith("| `")]
    assert all(rows), "every table row names `source` event and `module:function`"
    return [(m["source"], m["event"], m["subscriber"]) for m in rows]


def _name(fn) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def _registered() -> list[tuple[str, str, str]]:
    found = []
    for source, hooks in (("dispatch.hooks", dispatch_hooks), ("groves.hooks", grove_hooks),
                          ("accelerators.hooks", accelerator_hooks), ("artifacts.hooks", artifact_hooks)):
        for event, handlers in hooks.subscribers().items():
            found += [(source, event, _name(fn)) for fn in handlers]
    from apps import accelerators, dispatch, pipelines, workloads  # noqa: F401  (their states modules)
    for machine, name in ((_states("pipelines").NODE, "pipelines.states.NODE"),
                          (_states("pipelines").RUN, "pipelines.states.RUN"),
                          (_states("dispatch").JOB, "dispatch.states.JOB"),
                          (_states("workloads").GENERATION, "workloads.states.GENERATION"),
                          (_states("accelerators").CLAIM, "accelerators.states.CLAIM")):
        assert isinstance(machine, Lifecycle)
        found += [(name, "transition", _name(fn)) for fn in machine.listeners]
    sync_receivers, async_receivers = got_request_exception._live_receivers(None)
    found += [("Django got_request_exception", "", _name(fn)) for fn in [*sync_receivers, *async_receivers]
              if fn.__module__.startswith("apps.")]
    return found


def _states(app: str):
    import importlib

    return importlib.import_module(f"apps.{app}.states")


def test_the_documented_table_is_what_is_registered():
    documented = {(s, e, f) for s, e, f in _documented()}
    registered = {(s, e, f) for s, e, f in _registered()}
    # Django's signal has no event word of ours: compare it by source and subscriber.
    documented = {(s, "" if s.startswith("Django") else e, f) for s, e, f in documented}
    assert registered == documented


def test_job_ended_handlers_run_in_the_documented_order():
    documented = [f for s, e, f in _documented() if (s, e) == ("dispatch.hooks", "job_ended")]
    assert [_name(fn) for fn in dispatch_hooks.subscribers()["job_ended"]] == documented


def test_no_model_signal_receivers_of_ours():
    from django.apps import apps
    from django.db.models import signals

    for model in apps.get_models():
        for signal in (signals.pre_save, signals.post_save, signals.post_delete, signals.pre_delete):
            sync_receivers, async_receivers = signal._live_receivers(model)
            ours = [fn for fn in [*sync_receivers, *async_receivers]
                    if getattr(fn, "__module__", "").startswith("apps.")]
            assert not ours, (model, ours)
