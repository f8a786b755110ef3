"""A declared body's refusals are today's: stable code, exact field path, the nearest name for a typo."""
from __future__ import annotations

import pytest

from apps.core.bodies import Body, parse
from apps.core.errors import ValidationFailed
from apps.groves import rules
from tests.factories import heartbeat_body


def _refusal(body: dict) -> tuple[str, str, str]:
    with pytest.raises(ValidationFailed) as exc:
        rules.heartbeat(body, substrate="native", mesh_networks=["10.0.0.0/8"])
    return exc.value.code, exc.value.field, exc.value.detail


def test_an_unknown_key_names_the_nearest_declared_one():
    body = heartbeat_body(gpus=1)
    body["capacity"]["placement_units"][0]["cpu_mili"] = body["capacity"]["placement_units"][0].pop("cpu_milli")
    assert _refusal(body) == ("unknown_field", "capacity.placement_units[0].cpu_mili",
                              "'cpu_mili' is not a field here; did you mean 'cpu_milli'?")


@pytest.mark.parametrize(("mutate", "expected"), [
    (lambda b: b.update(version=7), ("invalid_type", "version", "version must be a string.")),
    (lambda b: b.pop("change_kinds"), ("field_required", "change_kinds", "'change_kinds' is required.")),
    (lambda b: b["capacity"]["placement_units"][0]["memory_bytes"].update(free=True),
     ("invalid_type", "capacity.placement_units[0].memory_bytes.free",
      "capacity.placement_units[0].memory_bytes.free must be an integer.")),
    (lambda b: b["capacity"]["accelerators"][0].update(vendor="  "),
     ("field_blank", "capacity.accelerators[0].vendor", "capacity.accelerators[0].vendor must not be empty.")),
    (lambda b: b["capacity"]["accelerators"][0].update(share_mode="sometimes"),
     ("invalid_choice", "capacity.accelerators[0].share_mode",
      "capacity.accelerators[0].share_mode must be one of: cooperative, exclusive, time_sliced.")),
    (lambda b: b["capacity"]["placement_units"][0]["accelerators"][0].update(free=5),
     ("free_exceeds_allocatable", "capacity.placement_units[0].accelerators[0].free",
      "capacity.placement_units[0].accelerators[0].free (5) exceeds allocatable (1).")),
    (lambda b: b.update(mesh={"address": "mesh.local", "proxy_port": 80}),
     ("mesh_address_invalid", "mesh.address",
      "'mesh.local' is not an IP address; the mesh address is an IP literal, never a host name.")),
    (lambda b: b.update(log_tail=["x"] * 501),
     ("too_many_items", "log_tail", "log_tail has 501 items; at most 500 are allowed.")),
])
def test_refusals_keep_todays_code_path_and_sentence(mutate, expected):
    body = heartbeat_body(gpus=1)
    mutate(body)
    assert _refusal(body) == expected


def test_a_body_that_is_not_an_object():
    assert _refusal([]) == ("invalid_type", "", "The body must be a JSON object.")


def test_normalised_values_come_back():
    body = heartbeat_body(gpus=1)
    body["change_kinds"] = ["native.job", "native.job"]
    body["capacity"]["accelerators"][0].update(vendor=" NVIDIA ", apis=["CUDA", "cuda"])
    data = rules.heartbeat(body, substrate="native")
    assert data["change_kinds"] == ["native.job"]
    assert (data["capacity"]["accelerators"][0]["vendor"], data["capacity"]["accelerators"][0]["apis"]) == (
        "nvidia", ["cuda"])


class _Inner(Body):
    a: int = 0
    b: int = 0


class _Outer(Body):
    first: int = 0
    inner: _Inner = _Inner()
    items: list[_Inner] = []
    last: int = 0


@pytest.mark.parametrize(("body", "expected"), [
    # several unknown keys in one object: the first by name, whatever the body's order
    ({"zeta": 1, "alpha": 1}, ("unknown_field", "alpha")),
    # an object's unknown keys before its values, and before anything inside it
    ({"first": "x", "inner": {"zz": 1}, "zz": 1}, ("unknown_field", "zz")),
    # a value met earlier in the walk before a key problem deeper in a later field
    ({"first": "x", "inner": {"zz": 1}}, ("invalid_type", "first")),
    ({"inner": {"a": "x"}, "items": [{"zz": 1}]}, ("invalid_type", "inner.a")),
    # items in order; within an item, its keys before its values
    ({"items": [{"a": "x"}, {"zz": 1}]}, ("invalid_type", "items[0].a")),
    ({"items": [{"b": "x", "zz": 1}]}, ("unknown_field", "items[0].zz")),
    # fields in their declared order, not the body's
    ({"last": "x", "first": "x"}, ("invalid_type", "first")),
])
def test_the_first_problem_is_the_one_a_walk_of_the_body_meets(body, expected):
    """What a hand reader reported (issue 35): the compute and run bodies' refusals depend on it."""
    with pytest.raises(ValidationFailed) as exc:
        parse(_Outer, body)
    assert (exc.value.code, exc.value.field) == expected
