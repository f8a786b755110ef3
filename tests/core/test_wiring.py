"""docs/architecture.md "Events and subscribers" is what is registered: no more, no fewer, in that order; and
every registration is made in an app's ``wiring.py``, whose ``connect`` its ``AppConfig.ready`` calls."""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from django.apps import apps as django_apps
from django.core.signals import got_request_exception
from django.db.models.signals import post_migrate

from apps.accelerators import hooks as accelerator_hooks
from apps.artifacts import hooks as artifact_hooks
from apps.core.lifecycle import Lifecycle
from apps.dispatch import hooks as dispatch_hooks
from apps.groves import hooks as grove_hooks

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
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
    for config in django_apps.get_app_configs():
        sync_receivers, async_receivers = post_migrate._live_receivers(config)
        found += [("Django post_migrate", "", _name(fn)) for fn in [*sync_receivers, *async_receivers]
                  if fn.__module__.startswith("apps.")]
    return found


def _states(app: str):
    import importlib

    return importlib.import_module(f"apps.{app}.states")


def test_the_documented_table_is_what_is_registered():
    documented = {(s, e, f) for s, e, f in _documented()}
    registered = {(s, e, f) for s, e, f in _registered()}
    # Django's signals have no event word of ours: compare them by source and subscriber.
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


def _registration_names() -> set[str]:
    """The calls that subscribe: each hooks module's ``on_*``/``register_*``, a lifecycle's ``listen`` and a
    Django signal's ``connect``."""
    names = {"listen", "connect"}
    for path in ROOT.joinpath("apps").glob("*/hooks.py"):
        names |= {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)
                  and node.name.startswith(("on_", "register_"))}
    return names


def registrations_outside_wiring(root: Path = ROOT) -> list[str]:
    names, found = _registration_names(), []
    for path in sorted(root.joinpath("apps").rglob("*.py")):
        if path.name == "wiring.py" or "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("connect", "listen") and not isinstance(func, ast.Attribute):
                continue  # a plain connect() is a database driver's, not a signal's
            if name == "connect" and getattr(func.value, "id", "") == "wiring":
                continue  # AppConfig.ready calling its wiring
            if name in names:
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {name}")
    return found


def test_every_registration_is_made_in_a_wiring_module():
    assert len(_registration_names()) >= 8
    assert registrations_outside_wiring() == []


def test_the_scan_finds_a_registration_made_elsewhere(tmp_path):
    (tmp_path / "apps" / "x").mkdir(parents=True)
    (tmp_path / "apps" / "x" / "services.py").write_text(
        "from apps.dispatch import hooks\nhooks.on_job_ended(print)\nsignal.connect(print)\nconnect('db')\n")
    assert registrations_outside_wiring(tmp_path) == ["apps/x/services.py:2 on_job_ended",
                                                      "apps/x/services.py:3 connect"]


def test_every_wiring_module_is_connected_by_its_apps_ready():
    wired = sorted(path.parent.name for path in ROOT.joinpath("apps").glob("*/wiring.py"))
    assert wired, "no wiring modules found"
    for config in django_apps.get_app_configs():
        if config.name.startswith("apps.") and config.name.split(".")[1] in wired:
            assert "wiring.connect(" in inspect.getsource(type(config).ready), config.name
            wired.remove(config.name.split(".")[1])
    assert wired == [], f"wiring.py of an app that is not installed: {wired}"
