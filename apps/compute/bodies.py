"""The compute submit body, declared once (``apps.core.bodies``) and validated from that declaration: the OpenAPI
schema of ``POST compute/jobs`` and ``POST plan``, the MCP tools' input schemas (``compute_submit``, ``plan``),
the CLI's help for these fields and the parse (``compute_request``) come from these classes. A step is an exec
node of a compute run: its resources, accelerators, backoff, inputs and outputs, and the rules on its image,
command, env and retries, are the pipeline node's (``apps.pipelines.bodies``). Pure: no Django (the CLI and
MCP import it).

Request (extend, never rename): ``{"name", "environment"?, "team"?, "grove"?, "steps": [Step, ...]}``. Container
steps become ``k8s.job`` work, native steps ``native.job`` work; steps run one after another, in the order given.
Every key is exact and every bound is a vocabulary constant; a key that may be null is declared ``| None``
exactly where null means "not given".
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from apps.core.bodies import Body, BodyError, count, parse, text
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S
from apps.groves.vocabulary import Role
from apps.pipelines.bodies import (
    NODE_ID,
    Command,
    Env,
    ImageArtifact,
    Inputs,
    Outputs,
    Platforms,
    StepAccelerators,
    StepBackoff,
    StepResources,
    backoff_rule,
    command_rule,
    env_rule,
    graph_canonical,
    image_rule,
    matching,
    node_canonical,
    outputs_rule,
)
from apps.pipelines.vocabulary import MAX_RETRIES, MAX_TIMEOUT_S, NodeKind, Reuse

MAX_STEPS = 100
StepName = matching(NODE_ID, "invalid_step_name", "Step name '{value}' must match [a-z0-9][a-z0-9_-]* (at most 63).",
                    max_length=63, description="Step name, unique in the job")


class ComputeStep(Body):
    """One step: a container image or a native host command. Declared in the order its fields are checked."""

    name: StepName  # type: ignore[valid-type]
    kind: Literal["container", "native"] = Field("container", description="A container image or a native "
                                                 "host command")
    image: text(500) | ImageArtifact | None = Field(  # type: ignore[valid-type]
        None, validate_default=True, description="Image reference or recorded image artifact (container steps)")
    command: Command = Field(..., description="argv to run")  # type: ignore[valid-type]
    env: Env | None = None  # type: ignore[valid-type]
    inputs: Inputs | None = None
    outputs: Outputs | None = None
    platform: Platforms | None = None
    resources: StepResources | None = None
    accelerators: StepAccelerators | None = None
    timeout_s: count(1, MAX_TIMEOUT_S) | None = Field(  # type: ignore[valid-type]
        None, description=f"Step timeout in seconds (default {DEFAULT_TIMEOUT_S})")
    retries: count(0, MAX_RETRIES) | None = Field(  # type: ignore[valid-type]
        None, description="Retries after a failed or timed-out attempt")
    backoff: StepBackoff | None = None

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any, info: ValidationInfo) -> Any:
        if "kind" not in info.data:
            return value  # its kind is refused already
        return image_rule(value, kind=NodeKind.EXEC, runtime=info.data["kind"])

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> Any:
        return command_rule(value, kind=NodeKind.EXEC)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return None if value is None else env_rule(value)

    @field_validator("outputs", mode="before")
    @classmethod
    def _outputs(cls, value: Any) -> Any:
        return outputs_rule(value, kind=NodeKind.EXEC)

    @field_validator("backoff", mode="before")
    @classmethod
    def _backoff(cls, value: Any, info: ValidationInfo) -> Any:
        if "retries" not in info.data or value is None:
            return value  # retries refused already; a null backoff is one not given
        return backoff_rule(value, retries=info.data["retries"] or 0)

    def node(self, *, needs: list[str], grove: str | None) -> dict[str, Any]:
        """The step as its canonical exec node of a compute run (never reused: a job asks for its work)."""
        return node_canonical(self, node_id=self.name, kind=NodeKind.EXEC, runtime=self.kind, command_given=True,
                              reuse=Reuse.NEVER, trust="trusted", family=Role.COMPUTE, grove=grove, needs=needs)


class ComputeJobRequest(Body):
    """``POST compute/jobs``: steps that run one after another on Groves."""

    name: text(200, description="Job name")  # type: ignore[valid-type]
    environment: text(100, blank=True) = ""  # type: ignore[valid-type]
    team: text(100, blank=True) = ""  # type: ignore[valid-type]
    grove: text(100) | None = Field(None, description="Pin every step to this Grove (id or slug)")  # type: ignore[valid-type]
    steps: list[ComputeStep] = Field(..., min_length=1, max_length=MAX_STEPS, description="Steps, run one after "
                                     "another")

    @field_validator("steps", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise BodyError("compute_steps_empty", "A compute job needs at least one step.")
        return value

    @model_validator(mode="after")
    def _names_unique(self) -> ComputeJobRequest:
        seen: dict[str, int] = {}
        for index, step in enumerate(self.steps):
            if step.name in seen:
                raise BodyError("duplicate_step_name", f"Step name '{step.name}' is used twice "
                                f"(steps[{seen[step.name]}] and steps[{index}]).", at=f"steps[{index}].name")
            seen[step.name] = index
        return self


def compute_request(body: Any) -> dict[str, Any]:
    """A compute request parsed: ``{"name", "environment", "team", "grove", "canonical", "step_fields"}``
    (``canonical``: the steps as a canonical pipeline graph; ``step_fields``: each node's step, for the
    refusals that name a step after the parse)."""
    parsed = parse(ComputeJobRequest, body)
    grove = parsed.grove.strip() if parsed.grove is not None else None
    nodes: list[dict[str, Any]] = []
    for step in parsed.steps:
        # Steps run one after another, in the order given.
        nodes.append(step.node(needs=[nodes[-1]["id"]] if nodes else [], grove=grove or None))
    return {"name": parsed.name, "environment": parsed.environment, "team": parsed.team, "grove": grove,
            "canonical": graph_canonical(nodes),
            "step_fields": {step.name: f"steps[{index}]" for index, step in enumerate(parsed.steps)}}
