"""The compute submit body, declared once (``apps.core.bodies``): the OpenAPI schema of ``POST compute/jobs``
and ``POST plan``, the MCP tools' input schemas (``compute_submit``, ``plan``) and the CLI's help for these
fields come from these classes (a step's resources, accelerators, backoff, inputs and outputs are the
pipeline node's, ``apps.pipelines.bodies``). Pure: no Django (the CLI and MCP import it).

Every key is exact (``resources`` and ``accelerators`` included) and every bound is the parser's own
constant; a key that may be null is declared ``| None`` exactly where the parser takes null for "not
given". The parse itself is ``apps.compute.rules.compute_request`` (each step through the pipeline node
parser, once); ``tests/compute/test_bodies.py`` holds the two to one meaning: what the declaration accepts
the parser accepts, and a key or bound the declaration refuses the parser refuses with today's code.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from apps.core.bodies import Body, count, text
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S
from apps.groves.vocabulary import MAX_PLATFORMS
from apps.pipelines.bodies import NODE_ID, StepAccelerators, StepBackoff, StepInput, StepOutput, StepResources
from apps.pipelines.vocabulary import MAX_ARG, MAX_ARGV, MAX_ENV, MAX_INPUTS, MAX_OUTPUTS, MAX_RETRIES, MAX_TIMEOUT_S

MAX_STEPS = 100
STEP_NAME = NODE_ID  # a step is an exec node of a compute run, named by its id


class ComputeStep(Body):
    """One step: a container image or a native host command."""

    name: str = Field(..., pattern=STEP_NAME, description="Step name, unique in the job")
    kind: Literal["container", "native"] = Field("container", description="A container image or a native "
                                                 "host command")
    image: text(500) | None = Field(None, description="Image reference (container steps)")  # type: ignore[valid-type]
    command: list[text(MAX_ARG, blank=True)] = Field(..., min_length=1, max_length=MAX_ARGV,  # type: ignore[valid-type]
                                                     description="argv to run")
    env: dict[str, text(MAX_ARG, blank=True)] | None = Field(None, max_length=MAX_ENV)  # type: ignore[valid-type]
    platform: list[str] | None = Field(None, min_length=1, max_length=MAX_PLATFORMS,
                                       description="Acceptable os/arch[/variant] in preference order, e.g. "
                                       "linux/amd64")
    resources: StepResources | None = None
    accelerators: StepAccelerators | None = None
    timeout_s: count(1, MAX_TIMEOUT_S) | None = Field(  # type: ignore[valid-type]
        None, description=f"Step timeout in seconds (default {DEFAULT_TIMEOUT_S})")
    retries: count(0, MAX_RETRIES) | None = Field(  # type: ignore[valid-type]
        None, description="Retries after a failed or timed-out attempt")
    backoff: StepBackoff | None = None
    inputs: list[StepInput] | None = Field(None, max_length=MAX_INPUTS)
    outputs: list[StepOutput] | None = Field(None, max_length=MAX_OUTPUTS)


class ComputeJobRequest(Body):
    """``POST compute/jobs``: steps that run one after another on Groves."""

    name: text(200, description="Job name")  # type: ignore[valid-type]
    environment: text(100, blank=True) = ""  # type: ignore[valid-type]
    team: text(100, blank=True) = ""  # type: ignore[valid-type]
    grove: text(100) | None = Field(None, description="Pin every step to this Grove (id or slug)")  # type: ignore[valid-type]
    steps: list[ComputeStep] = Field(..., min_length=1, max_length=MAX_STEPS, description="Steps, run one after "
                                     "another")
