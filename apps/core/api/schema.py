"""Declared bodies (``apps.core.bodies.Body``) in the OpenAPI schema: drf-spectacular's own pydantic
extension emits JSON Schema 2020-12 (``{"type": "null"}`` in an ``anyOf``), which OpenAPI 3.0 refuses; this
one asks pydantic for the 3.0 spelling (``nullable: true``) and files the nested models as components. A
``RootModel`` of declared bodies (one of several) is filed the same way. Imported by ``CoreConfig.ready`` so
the extensions are registered before any schema is built."""
from __future__ import annotations

import typing
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent

from apps.core.bodies import openapi30_schema


class DeclaredBodyExtension(OpenApiSerializerExtension):
    target_class = "apps.core.bodies.Body"
    match_subclasses = True
    priority = 1  # before drf-spectacular's generic pydantic extension

    def get_name(self, auto_schema: Any, direction: str) -> str:
        return self.target.__name__

    def map_serializer(self, auto_schema: Any, direction: str) -> dict:
        schema = openapi30_schema(self.target, ref_template="#/components/schemas/{model}")
        for name, sub_schema in schema.pop("$defs", {}).items():
            auto_schema.registry.register_on_missing(ResolvedComponent(
                name=name, type=ResolvedComponent.SCHEMA, object=name, schema=sub_schema))
        return schema


class DeclaredChoiceExtension(DeclaredBodyExtension):
    """A body that is one of several declarations (a pydantic ``RootModel`` of a union, ``PlanRequest``):
    ``anyOf`` the declared bodies, each the very component its own endpoint uses."""

    target_class = "pydantic.RootModel"

    def map_serializer(self, auto_schema: Any, direction: str) -> dict:
        members = typing.get_args(self.target.model_fields["root"].annotation)
        return {"anyOf": [auto_schema.resolve_serializer(member, direction).ref for member in members],
                "description": self.target.__doc__ or ""}
