"""The API's JSON renderer (``apps.core.api.renderers``): orjson's bytes, the same JSON DRF's renderer writes
for every value an answer holds (timestamps, decimals, UUIDs, lazy strings, nested containers), and DRF's own
rendering when a client asks for indentation."""
from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from django.utils.translation import gettext_lazy
from rest_framework.renderers import JSONRenderer

from apps.core.api.renderers import FastJSONRenderer, json_bytes

AT = datetime.datetime(2026, 12, 3, 17, 5, 6, 123456, tzinfo=datetime.UTC)
VALUE = {
    "at": AT, "at_offset": AT.astimezone(datetime.timezone(datetime.timedelta(hours=2))),
    "day": AT.date(), "time": AT.time(), "price": decimal.Decimal("1.50"), "id": uuid.UUID(int=7),
    "lazy": gettext_lazy("placed"), "text": "é \\ \" \n", "nested": [{"a": 1, "b": None, "c": True, "d": 0.25}],
    "tuple": (1, 2), "big": 2**62,
}


def test_the_answer_is_the_json_drf_renders():
    ours, drf = FastJSONRenderer().render(VALUE), JSONRenderer().render(VALUE)
    assert json.loads(ours) == json.loads(drf)
    assert json.loads(ours)["at"] == "2026-12-03T17:05:06.123456Z"  # DRF's encoder writes UTC as Z
    assert ours == json_bytes(VALUE) and b" " not in json_bytes({"a": [1, 2]})  # compact, as DRF's


def test_indentation_asked_for_is_drfs_rendering():
    indented = FastJSONRenderer().render({"a": [1]}, "application/json; indent=2", {})
    assert indented == JSONRenderer().render({"a": [1]}, "application/json; indent=2", {})
    assert b"\n  " in indented


def test_nothing_renders_as_no_body_and_an_unknown_type_is_refused():
    assert FastJSONRenderer().render(None) == b""
    with pytest.raises(TypeError):
        json_bytes({"x": object()})


def test_a_non_finite_float_is_null_where_drf_refused_it():
    """The one value where the bytes differ in kind (module docstring): valid JSON instead of DRF's error."""
    assert json_bytes({"x": float("nan"), "y": float("inf")}) == b'{"x":null,"y":null}'
    with pytest.raises(ValueError):
        JSONRenderer().render({"x": float("nan")})
