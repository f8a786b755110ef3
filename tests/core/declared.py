"""Holding a body's declaration (``apps.core.bodies``) and its parser to one meaning: the same keys at every
level, the same bounds. Since issue 35 the compute and pipeline bodies are parsed from their declarations;
these hold that each level's refusal names exactly its declared keys and each declared bound is refused at
the field's own path (``tests/compute/test_bodies.py``, ``tests/pipelines/test_bodies.py``)."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from apps.core.errors import ValidationFailed

Parse = Callable[[Any], Any]
Put = Callable[[dict, Any], None]


def assert_same_keys(parse: Parse, body: dict, put: Put, model: type[BaseModel], minimal: dict) -> None:
    """An unknown key where ``put`` places it: the parser's list of allowed names is the model's fields, and
    the model refuses the key too."""
    put(body, {"zz_unknown": 1})
    with pytest.raises(ValidationFailed) as exc:
        parse(body)
    assert exc.value.code == "unknown_field"
    allowed = set(re.search(r"expected one of: ([^)]*)\)", exc.value.detail).group(1).split(", "))
    assert allowed == set(model.model_fields)
    with pytest.raises(ValueError, match="zz_unknown"):
        model.model_validate({**minimal, "zz_unknown": 1})


def bounds(model: type[BaseModel], name: str) -> tuple[int, int]:
    """The declared (minimum, maximum) of an integer field, through the published JSON Schema."""
    prop = model.model_json_schema()["properties"][name]
    inner = next((item for item in prop.get("anyOf", [prop]) if item.get("type") == "integer"), prop)
    return inner["minimum"], inner["maximum"]


def assert_same_bounds(parse: Parse, body: dict, put: Put, model: type[BaseModel], name: str, path: str) -> None:
    """The declared maximum passes the parser and one more is ``out_of_range`` at ``path``; likewise one
    below a positive minimum."""
    low, high = bounds(model, name)
    put(body, high)
    parse(body)
    put(body, high + 1)
    with pytest.raises(ValidationFailed) as exc:
        parse(body)
    assert (exc.value.code, exc.value.field) == ("out_of_range", path)
    if low > 0:
        put(body, low - 1)
        with pytest.raises(ValidationFailed) as exc:
            parse(body)
        assert exc.value.code == "out_of_range" and exc.value.field.startswith(path.rsplit(".", 1)[0])
