"""Pure rules of the wrapper: hostname reading and counting a plan's changes (no engine, no database).

The plan JSON here is hand-written to cover actions a provider-free plan cannot produce (update,
replace, forget); the real ``show -json`` path is covered in test_services.py.
"""

from __future__ import annotations

from apps.infra.policy import ApplyPolicyRow
from apps.infra.rules import hostname_read, plan_changes_summarise, plan_limits_breaches


def _change(address: str, *actions: str, mode: str = "managed") -> dict:
    return {"address": address, "mode": mode, "change": {"actions": list(actions)}}


def test_hostname_is_the_first_line_lowercased(tmp_path):
    path = tmp_path / "hostname"
    path.write_text("GPU-Box-1\nignored\n")
    assert hostname_read(hostname_file=path) == "gpu-box-1"


def test_empty_hostname_file_names_no_host(tmp_path):
    path = tmp_path / "hostname"
    path.write_text("\n")
    assert hostname_read(hostname_file=path) == ""


def test_changes_are_counted_by_kind_and_a_replace_is_both():
    changes = plan_changes_summarise(
        {
            "resource_changes": [
                _change("a.new", "create"),
                _change("a.same", "no-op"),
                _change("data.x.read", "read", mode="data"),
                _change("a.edit", "update"),
                _change("a.gone", "delete"),
                _change("a.swap", "delete", "create"),
                _change("a.swap_first", "create", "delete"),
                _change("a.forgotten", "forget"),
            ],
            "planned_values": {"outputs": {"visible": {"value": 1}, "secret": {"sensitive": True, "value": "x"}}},
        }
    )
    assert changes.creates == ("a.new", "a.swap", "a.swap_first")
    assert changes.destroys == ("a.gone", "a.swap", "a.swap_first")
    # An unfamiliar action counts against max_updates rather than slipping past every maximum.
    assert changes.updates == ("a.edit", "a.forgotten")
    assert changes.outputs == {"visible": 1}


def test_breaches_name_every_offending_address():
    row = ApplyPolicyRow("env", "host", "apply", max_creates=1, max_updates=0, max_destroys=5)
    changes = plan_changes_summarise(
        {"resource_changes": [_change("a.one", "create"), _change("a.two", "create"), _change("a.up", "update")]}
    )
    assert plan_limits_breaches(changes=changes, row=row) == [
        "2 creates > max_creates 1: a.one, a.two",
        "1 updates > max_updates 0: a.up",
    ]


def test_an_empty_plan_breaches_nothing():
    row = ApplyPolicyRow("env", "host", "plan-only", 0, 0, 0)
    assert plan_limits_breaches(changes=plan_changes_summarise({}), row=row) == []
