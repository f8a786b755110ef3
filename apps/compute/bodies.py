"""The compute submit body, declared once (``apps.core.bodies``): the OpenAPI schema of ``POST compute/jobs``
and ``POST plan``, the MCP tools' input schemas (``compute_submit``, ``plan``) and the CLI's help for these
fields come from these classes. Pure: no Django (the CLI and MCP import it).

Every key is exact (``resources`` and ``accelerators`` included) and every bound is the parser's own
constant; a key that may be null is declared ``| None`` exactly where the parser takes null for "not
given". The parse itself is ``apps.compute.rules.compute_request`` (each step through the pipeline node
parser, once); ``tests/compute/test_bodies.py`` holds the two to one meaning: what the declaration accepts
the parser accepts, and a key or bound the declaration refuses the parser refuses with today's code.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from apps.accelerators.vocabulary import MAX_ACCELERATOR_COUNT, MAX_ACCELERATOR_MEMORY
from apps.artifacts.vocabulary import StorageKind
from apps.core.bodies import Body, count, text
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S
from apps.groves.vocabulary import MAX_CPU_MILLI, MAX_MEMORY_BYTES, MAX_PLATFORMS
from apps.pipelines.vocabulary import (
    DEFAULT_BACKOFF,
    MAX_ARG,
    MAX_ARGV,
    MAX_BACKOFF_FACTOR,
    MAX_BACKOFF_S,
    MAX_DATA_PATH,
    MAX_ENV,
    MAX_INPUTS,
    MAX_OUTPUTS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
)
from apps.placement.vocabulary import DEFAULT_CPU_MILLI, DEFAULT_MEMORY_BYTES

MAX_STEPS = 100
StorageKindName = Literal[tuple(m.value for m in StorageKind)]  # type: ignore[valid-type]
STEP_NAME = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DATA_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class StepResources(Body):
    """What one step needs on one placement unit (at least 1 of each)."""

    cpu_milli: count(1, MAX_CPU_MILLI, description=f"CPU in milli-cores (1000 = one core; default "  # type: ignore[valid-type]
                     f"{DEFAULT_CPU_MILLI})") = DEFAULT_CPU_MILLI
    memory_bytes: count(1, MAX_MEMORY_BYTES, description=f"Memory in bytes (default "  # type: ignore[valid-type]
                        f"{DEFAULT_MEMORY_BYTES})") = DEFAULT_MEMORY_BYTES


class StepAccelerators(Body):
    """Accelerators for one step, on one unit."""

    count: count(1, MAX_ACCELERATOR_COUNT, description="How many devices (Apple: exactly 1)")  # type: ignore[valid-type]
    vendor: text(50) | None = Field(None, description="nvidia, apple, amd, intel, ...")  # type: ignore[valid-type]
    api: text(30) | None = Field(  # type: ignore[valid-type]
        None, description="cuda, metal, rocm, oneapi, ...; implied by a known vendor")
    min_memory_bytes: count(0, MAX_ACCELERATOR_MEMORY, description="Least device memory") = 0  # type: ignore[valid-type]


class StepBackoff(Body):
    """The wait before each retry: delay_s * factor ** (attempt - 1), at most max_s."""

    delay_s: count(0, MAX_BACKOFF_S) = DEFAULT_BACKOFF["delay_s"]  # type: ignore[valid-type]
    factor: count(1, MAX_BACKOFF_FACTOR) = DEFAULT_BACKOFF["factor"]  # type: ignore[valid-type]
    max_s: count(0, MAX_BACKOFF_S) = DEFAULT_BACKOFF["max_s"]  # type: ignore[valid-type]


class StepInput(Body):
    """An artifact the step reads, named by exactly one of artifact, digest or image; resolved at submit."""

    artifact: count(1, 2 ** 63 - 1) | None = Field(None, description="An artifact id")  # type: ignore[valid-type]
    digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$", description="A blob's digest")
    image: text(500) | None = Field(None, description="An image reference")  # type: ignore[valid-type]
    kind: StorageKindName | None = None  # type: ignore[valid-type]
    storage_kind: StorageKindName | None = None  # type: ignore[valid-type]
    ref: text(500, blank=True) | None = None  # type: ignore[valid-type]
    path: text(MAX_DATA_PATH) | None = Field(  # type: ignore[valid-type]
        None, description="Where the step sees it, relative to its workspace")
    name: str | None = Field(None, pattern=DATA_NAME)


class StepOutput(Body):
    """What the executor uploads after a successful command (a directory as a deterministic tar)."""

    name: str = Field(..., pattern=DATA_NAME)
    path: text(MAX_DATA_PATH, description="Relative to the step's workspace")  # type: ignore[valid-type]


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
