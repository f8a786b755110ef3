"""Typed body declarations (pydantic v2) parsed into today's error shape. Pure: no Django.

A body is declared once, as a pydantic model built from ``Body`` (exact keys, strict types, bounds from the
vocabularies); that one declaration gives its validation (``parse``), its JSON Schema (the OpenAPI schema
through drf-spectacular, the MCP tool's input schema) and the CLI's help. ``parse`` turns pydantic's
structured errors into the ``ValidationFailed`` of ``apps.core.validation``: the same stable codes, the same
sentences, the exact field path (``capacity.placement_units[0].cpu_milli.free``) and, for an unknown key,
the nearest declared name. Rules that span fields raise ``BodyError`` from a validator: its code, its
sentence and a path below the object that raised it. Why pydantic and not msgspec: docs/decisions.md,
"Request bodies: one declaration".
"""
from __future__ import annotations

import re
import typing
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from pydantic.json_schema import DEFAULT_REF_TEMPLATE, GenerateJsonSchema, JsonSchemaValue

from apps.core.errors import ValidationFailed
from apps.core.platforms import PlatformError, normalise_platform
from apps.core.validation import unknown_field_sentence

M = TypeVar("M", bound=BaseModel)


class Body(BaseModel):
    """The base of every declared body: unknown keys refused, no coercion ("1" is not 1, true is not 1)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class BodyError(ValueError):
    """A refusal raised inside a validator, in today's shape. ``detail`` may say ``{field}``: the path of
    the failing value (the object that raised it, plus ``at``)."""

    def __init__(self, code: str, detail: str, at: str = "") -> None:
        super().__init__(detail)
        self.code, self.detail, self.at = code, detail, at


def _not_blank(value: str) -> str:
    if not value.strip():
        raise BodyError("field_blank", "{field} must not be empty.")
    return value


def text(max_length: int = 200, *, blank: bool = False, description: str | None = None) -> Any:
    """A string field: at most ``max_length`` characters, not blank unless ``blank``."""
    field = Field(max_length=max_length, description=description)
    return Annotated[str, field] if blank else Annotated[str, field, AfterValidator(_not_blank)]


def count(minimum: int, maximum: int, *, description: str | None = None) -> Any:
    return Annotated[int, Field(ge=minimum, le=maximum, description=description)]


def _first_kept(values: list[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def choices(literal: Any, *, max_items: int = 32, description: str | None = None) -> Any:
    """A list of choices, repeats dropped (order kept: a list of choices may be a preference)."""
    return Annotated[list[literal], Field(max_length=max_items, description=description),
                     AfterValidator(_first_kept)]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


def may_omit(description: str | None = None) -> Any:
    """The ``Field`` of a key that may be left out but is never null (a reader's ``body.get(key)`` followed
    by a check that refuses None): not required, null refused, no default shown in the schema. Read which
    keys were given with ``model_dump(exclude_unset=True)``."""
    return Field(None, description=description, json_schema_extra=_no_default)


def literal(sentence: str) -> str:
    """A sentence that quotes the body (a platform string) safe for ``BodyError``'s ``{field}``."""
    return sentence.replace("{", "{{").replace("}", "}}")


def platforms(max_items: int, *, blank: str, description: str | None = None) -> Any:
    """A platform list, read as ``apps.core.validation.platforms`` reads it: each entry normalised
    (``core.platforms``; ``invalid_platform`` naming the entry), order kept (a preference), repeats dropped;
    empty refused with ``blank`` (``field_blank``; the sentence may say ``{field}``)."""
    def read(value: Any) -> Any:
        if not isinstance(value, list) or len(value) > max_items:
            return value  # the declared type and bound refuse it, in today's words
        if not value:
            raise BodyError("field_blank", blank)
        out: list[str] = []
        for index, item in enumerate(value):
            try:
                platform = normalise_platform(item)
            except PlatformError as exc:
                raise BodyError("invalid_platform", literal(str(exc)), at=f"[{index}]") from None
            if platform not in out:
                out.append(platform)
        return out

    return Annotated[list[str], Field(min_length=1, max_length=max_items, description=description),
                     BeforeValidator(read)]


# --- parsing: pydantic's errors in today's shape ---------------------------------------------------

_TYPE_SENTENCES = {
    "int": "{field} must be an integer.", "str": "{field} must be a string.", "bool": "{field} must be true or false.",
    "list": "{field} must be a list.", "dict": "{field} must be a JSON object.",
}
_INVALID_TYPE = {
    "int_type": "int", "int_from_float": "int", "int_parsing": "int", "string_type": "str", "bool_type": "bool",
    "list_type": "list", "tuple_type": "list", "dict_type": "dict", "model_type": "dict",
    "model_attributes_type": "dict",
}
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def path_of(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The declared model that holds the value at ``loc`` (for an unknown key: the names it allows)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            declared = current.model_fields.get(part)
            current = _inner_model(declared.annotation) if declared else None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _failure(model: type[BaseModel], error: Any) -> ValidationFailed:
    loc = tuple(error["loc"])
    kind, ctx = error["type"], error.get("ctx") or {}
    field = path_of(loc)
    if kind == "value_error" and isinstance(ctx.get("error"), BodyError):
        raised: BodyError = ctx["error"]
        joint = "" if raised.at.startswith("[") else "."
        where = f"{field}{joint}{raised.at}" if raised.at and field else (raised.at or field)
        return ValidationFailed(raised.code, raised.detail.format(field=field), field=where)
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        allowed = set(parent.model_fields) if parent else set()
        return ValidationFailed("unknown_field", unknown_field_sentence(loc[-1], allowed), field=field)
    if kind == "missing":
        return ValidationFailed("field_required", f"'{loc[-1]}' is required.", field=field)
    if kind in _INVALID_TYPE:
        sentence = _TYPE_SENTENCES[_INVALID_TYPE[kind]]
        if _INVALID_TYPE[kind] == "dict" and not field:
            return ValidationFailed("invalid_type", "The body must be a JSON object.", field="")
        return ValidationFailed("invalid_type", sentence.format(field=field), field=field)
    if kind in ("greater_than_equal", "greater_than"):
        return ValidationFailed("out_of_range", f"{field} must be at least {ctx.get('ge', ctx.get('gt'))}.",
                                field=field)
    if kind in ("less_than_equal", "less_than"):
        return ValidationFailed("out_of_range", f"{field} must be at most {ctx.get('le', ctx.get('lt'))}.",
                                field=field)
    if kind == "string_too_long":
        return ValidationFailed("too_long", f"{field} is longer than {ctx['max_length']} characters.", field=field)
    if kind == "too_long":
        return ValidationFailed("too_many_items", f"{field} has {ctx['actual_length']} items; at most "
                                f"{ctx['max_length']} are allowed.", field=field)
    if kind in ("literal_error", "enum"):
        options = sorted(_QUOTED.findall(str(ctx.get("expected", ""))))
        return ValidationFailed("invalid_choice", f"{field} must be one of: {', '.join(options)}.", field=field)
    return ValidationFailed("invalid", f"{field or 'The body'}: {error['msg']}", field=field)


# The first problem is the one a reader walking the body would meet first: fields in their declared order,
# list items in order, and at each object its unknown keys (by name), then its missing keys (by name), before
# any of its values (what a person fixes first).
_KEY_ERRORS = {"extra_forbidden": 0, "missing": 1}


def _walk_position(model: type[BaseModel], error: Any) -> list[tuple[int, int, str]]:
    loc, kind = tuple(error["loc"]), error["type"]
    position: list[tuple[int, int, str]] = []
    current: Any = model
    for depth, part in enumerate(loc):
        if depth == len(loc) - 1 and kind in _KEY_ERRORS:
            position.append((0, _KEY_ERRORS[kind], str(part)))
            break
        if isinstance(part, int):
            position.append((1, part, ""))
        elif isinstance(current, type) and issubclass(current, BaseModel):
            names = list(current.model_fields)
            position.append((1, names.index(part) if part in names else len(names), ""))
            declared = current.model_fields.get(part)
            current = _inner_model(declared.annotation) if declared else None
        else:
            position.append((1, 0, str(part)))  # a key of a mapping (an env name): by name
    return position


def _first_error(model: type[BaseModel], errors: list[Any]) -> Any:
    return min(enumerate(errors), key=lambda item: (_walk_position(model, item[1]), item[0]))[1]


def parse(model: type[M], body: Any, *, context: dict[str, Any] | None = None) -> M:
    """``body`` as a ``model``, or ``ValidationFailed`` for its first problem in today's shape."""
    try:
        return model.model_validate(body, context=context)
    except PydanticValidationError as exc:
        raise _failure(model, _first_error(model, exc.errors(include_url=False, include_input=False))) from None


class _OpenAPI30(GenerateJsonSchema):
    """OpenAPI 3.0 has no ``type: null``: an optional value is ``nullable: true`` (a ``$ref`` wrapped in
    ``allOf``, whose siblings 3.0 would ignore)."""

    def nullable_schema(self, schema: Any) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if "$ref" in inner:
            return {"allOf": [inner], "nullable": True}
        return {**inner, "nullable": True}


def openapi30_schema(model: type[BaseModel], *, ref_template: str = DEFAULT_REF_TEMPLATE) -> dict[str, Any]:
    """The declaration's schema for the OpenAPI document (drf-spectacular: ``apps.core.api.schema``)."""
    return model.model_json_schema(ref_template=ref_template, schema_generator=_OpenAPI30)


def describe(model: type[BaseModel], name: str) -> str:
    """A declared field's description (the CLI's help for the option that fills it)."""
    return model.model_fields[name].description or ""


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The declaration's JSON Schema (2020-12: what an MCP tool and the CLI show)."""
    return model.model_json_schema()


__all__ = [
    "Body",
    "BodyError",
    "choices",
    "count",
    "describe",
    "json_schema",
    "literal",
    "may_omit",
    "openapi30_schema",
    "parse",
    "path_of",
    "platforms",
    "text",
]
