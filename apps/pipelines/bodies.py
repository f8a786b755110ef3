"""The pipeline run body, declared once (``apps.core.bodies``): the OpenAPI schema of ``POST pipelines/runs``
and of ``POST plan``'s run request, and the MCP ``plan`` tool's ``graph`` argument come from these classes.
The parts a node shares with a compute step (resources, accelerators, backoff, inputs, outputs) are declared
here once and used by ``apps.compute.bodies``. Pure: no Django (the CLI and MCP import it).

Every key is exact and every bound is the node parser's own constant; a key that may be null is declared
``| None`` exactly where the parser takes null for "not given". The parse itself is
``apps.pipelines.rules.graph_validate`` (it also checks what spans fields: runtime only on exec nodes,
image per runtime, ids unique, needs known, no cycle); ``tests/pipelines/test_bodies.py`` holds the two to
one meaning, as ``tests/compute/test_bodies.py`` does for compute.
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
    MAX_NODES,
    MAX_OUTPUTS,
    MAX_RETRIES,
    MAX_TIMEOUT_S,
    NodeKind,
    NodeRuntime,
    Reuse,
    RunKind,
)
from apps.placement.vocabulary import DEFAULT_CPU_MILLI, DEFAULT_MEMORY_BYTES, FAMILIES, TRUST_LEVELS

StorageKindName = Literal[tuple(m.value for m in StorageKind)]  # type: ignore[valid-type]
NodeKindName = Literal[tuple(m.value for m in NodeKind)]  # type: ignore[valid-type]
RuntimeName = Literal[tuple(m.value for m in NodeRuntime)]  # type: ignore[valid-type]
ReuseName = Literal[tuple(m.value for m in Reuse)]  # type: ignore[valid-type]
RunKindName = Literal[tuple(m.value for m in RunKind)]  # type: ignore[valid-type]
TrustName = Literal[tuple(str(m) for m in TRUST_LEVELS)]  # type: ignore[valid-type]
FamilyName = Literal[tuple(str(m) for m in FAMILIES)]  # type: ignore[valid-type]
NODE_ID = r"^[a-z0-9][a-z0-9_-]{0,62}$"
DATA_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
MAX_ID = 2 ** 63 - 1


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

    artifact: count(1, MAX_ID) | None = Field(None, description="An artifact id")  # type: ignore[valid-type]
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


class ImageArtifact(Body):
    """An image given as a recorded artifact: Host pins it at submit."""

    artifact: count(1, MAX_ID, description="The image artifact's id")  # type: ignore[valid-type]


class PipelineNode(Body):
    """One node of a Canopy Pipeline Graph; it runs after the nodes it ``needs``."""

    id: str = Field(..., pattern=NODE_ID, description="Node id, unique in the graph")
    kind: NodeKindName = Field(..., description="exec, build_image or deploy")  # type: ignore[valid-type]
    runtime: RuntimeName = Field("container", description="exec nodes only: a container image or a native "  # type: ignore[valid-type]
                                 "host command")
    image: text(500) | ImageArtifact | None = Field(  # type: ignore[valid-type]
        None, description="Image reference or recorded image artifact (container nodes)")
    command: list[text(MAX_ARG, blank=True)] | None = Field(  # type: ignore[valid-type]
        None, min_length=1, max_length=MAX_ARGV, description="argv to run (exec nodes)")
    env: dict[str, text(MAX_ARG, blank=True)] = Field({}, max_length=MAX_ENV)  # type: ignore[valid-type]
    inputs: list[StepInput] = Field([], max_length=MAX_INPUTS)
    outputs: list[StepOutput] | None = Field(None, max_length=MAX_OUTPUTS, description="exec nodes only")
    platform: list[str] | None = Field(None, min_length=1, max_length=MAX_PLATFORMS,
                                       description="Acceptable os/arch[/variant] in preference order")
    resources: StepResources = StepResources()
    accelerators: StepAccelerators | None = None
    timeout_s: count(1, MAX_TIMEOUT_S, description=f"Node timeout in seconds (default "  # type: ignore[valid-type]
                     f"{DEFAULT_TIMEOUT_S})") = DEFAULT_TIMEOUT_S
    retries: count(0, MAX_RETRIES, description="Retries after a failed or timed-out attempt") = 0  # type: ignore[valid-type]
    backoff: StepBackoff | None = Field(None, description="With retries only")
    reuse: ReuseName = Field("graph_dedup", description="May it inherit an earlier identical result")  # type: ignore[valid-type]
    trust: TrustName = "trusted"  # type: ignore[valid-type]
    family: FamilyName | None = Field(None, description="exec nodes: the Grove role it runs on")  # type: ignore[valid-type]
    grove: text(100) | None = Field(None, description="Pin the node to this Grove (id or slug)")  # type: ignore[valid-type]
    needs: list[text(63)] = Field([], max_length=MAX_NODES, description="Ids of the nodes it runs after")  # type: ignore[valid-type]


class PipelineGraph(Body):
    """A Canopy Pipeline Graph: its nodes (edges are each node's ``needs``)."""

    nodes: list[PipelineNode] = Field(..., min_length=1, max_length=MAX_NODES, description="The graph's nodes")


class RunRequest(Body):
    """``POST pipelines/runs``: a graph and the kind of run."""

    graph: PipelineGraph
    kind: RunKindName = Field(..., description="build, deploy or compute")  # type: ignore[valid-type]
    environment: text(100) | None = None  # type: ignore[valid-type]
    team: text(100) | None = None  # type: ignore[valid-type]
    build_id: text(100) | None = None  # type: ignore[valid-type]
