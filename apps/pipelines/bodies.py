"""The pipeline run body, declared once (``apps.core.bodies``) and validated from that declaration: the OpenAPI
schema of ``POST pipelines/runs`` and of ``POST plan``'s run request, the MCP ``plan`` tool's ``graph``
argument, and the parse (``run_request``, ``graph_parse``) all come from these classes. The parts a node shares
with a compute step (resources, accelerators, backoff, inputs, outputs, and the rules on image, command, env
and retries) are declared here once and used by ``apps.compute.bodies``. Pure: no Django (the CLI and MCP
import it).

Every key is exact and every bound is a vocabulary constant; a key that may be null is declared ``| None``
exactly where null means "not given". What spans fields is a validator on the model that holds the fields:
runtime only on exec nodes, image and command per kind and runtime, outputs only on exec nodes, a backoff
only with retries, repeated input and output names; ids unique, needs known and no cycle on the graph.
Each refusal keeps the code, the sentence and the field path the hand parser it replaced gave (the tests
in tests/pipelines and tests/compute hold them). ``graph_canonical`` turns a parsed graph into the
canonical form its digests are taken over (defaults filled, nodes sorted by id).
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, TypeAdapter, ValidationInfo, field_validator, model_validator

from apps.accelerators.rules import request_problem
from apps.accelerators.vocabulary import MAX_ACCELERATOR_COUNT, MAX_ACCELERATOR_MEMORY
from apps.artifacts.digests import DIGEST_RE
from apps.artifacts.rules import NODE_ID as NODE_ID_RE
from apps.artifacts.vocabulary import StorageKind
from apps.core.bodies import Body, BodyError, count, literal, parse, platforms, text
from apps.dispatch.vocabulary import DEFAULT_TIMEOUT_S
from apps.groves.vocabulary import MAX_CPU_MILLI, MAX_MEMORY_BYTES, MAX_PLATFORMS
from apps.pipelines.rules import find_cycle
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
NODE_KINDS = tuple(NodeKind)
NODE_ID = NODE_ID_RE.pattern  # one definition: an object key names the node it was written for
DATA_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
DATA_SEGMENT = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
MAX_ID = 2 ** 63 - 1


# --- field types whose refusals say more than a bound ----------------------------------------------------

def matching(pattern: str, code: str, sentence: str, *, max_length: int, description: str | None = None) -> Any:
    """A non-blank string of at most ``max_length`` that matches ``pattern``; else ``code`` with ``sentence``
    (``{value}``: the string given). The schema shows the pattern."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise BodyError(code, sentence.format(value=literal(value)))
        return value

    return Annotated[text(max_length, description=description), Field(json_schema_extra={"pattern": pattern}),
                     AfterValidator(check)]


def _data_path(code: str, description: str | None = None) -> Any:
    """A relative path inside the step's workspace, in plain segments: never absolute, never ``..``, no hidden
    or empty segment (executors re-check it against the real directory)."""
    def check(path: str) -> str:
        if path.startswith("/") or any(not DATA_SEGMENT.match(segment) for segment in path.split("/")):
            raise BodyError(code, "{field} must be a relative path of plain segments (letters, digits, '.', '_', "
                            "'-'; not '.' or '..', not starting with '.').")
        return path

    return Annotated[text(MAX_DATA_PATH, description=description), AfterValidator(check)]


NodeId = matching(NODE_ID, "invalid_node_id", "Node id '{value}' must match [a-z0-9][a-z0-9_-]* (at most 63).",
                  max_length=63, description="Node id, unique in the graph")
DataName = matching(DATA_NAME, "invalid_data_name", "'{value}' must match [A-Za-z0-9][A-Za-z0-9_.-]* (at most 63).",
                    max_length=63)
Digest = matching(DIGEST_RE.pattern, "invalid_digest", "{{field}} must be 'sha256:' and 64 lowercase hex digits.",
                  max_length=80, description="A blob's digest")


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

    @model_validator(mode="after")
    def _consistent(self) -> StepAccelerators:
        problem = request_problem(count=self.count, vendor=self.normal_vendor, api=_lower(self.api))
        if problem is not None:
            code, detail, key = problem
            raise BodyError(code, literal(detail), at=key)
        return self

    @property
    def normal_vendor(self) -> str | None:
        return _lower(self.vendor)


def _lower(value: str | None) -> str | None:
    return None if value is None else value.strip().lower()


class StepBackoff(Body):
    """The wait before each retry: delay_s * factor ** (attempt - 1), at most max_s."""

    delay_s: count(0, MAX_BACKOFF_S) = DEFAULT_BACKOFF["delay_s"]  # type: ignore[valid-type]
    factor: count(1, MAX_BACKOFF_FACTOR) = DEFAULT_BACKOFF["factor"]  # type: ignore[valid-type]
    max_s: count(0, MAX_BACKOFF_S) = DEFAULT_BACKOFF["max_s"]  # type: ignore[valid-type]

    @field_validator("max_s", mode="before")
    @classmethod
    def _cap_not_below_delay(cls, value: Any, info: ValidationInfo) -> Any:
        delay = info.data.get("delay_s", 0)
        if isinstance(value, int) and not isinstance(value, bool) and value < delay:
            raise BodyError("out_of_range", f"{{field}} must be at least {delay}.")
        return value

    def canonical(self) -> dict[str, int]:
        """Defaults filled; a cap left out is never below the delay."""
        cap = self.max_s if "max_s" in self.model_fields_set else max(self.delay_s, DEFAULT_BACKOFF["max_s"])
        return {"delay_s": self.delay_s, "factor": self.factor, "max_s": cap}


_REFERENCES = ("artifact", "digest", "image")


class StepInput(Body):
    """An artifact the step reads, named by exactly one of artifact, digest or image; resolved at submit
    (``apps.artifacts.services.artifact_input_resolve``); ``storage_kind``/``ref`` narrow a digest."""

    artifact: count(1, MAX_ID) | None = Field(None, description="An artifact id")  # type: ignore[valid-type]
    digest: Digest | None = None  # type: ignore[valid-type]
    image: text(500) | None = Field(None, description="An image reference")  # type: ignore[valid-type]
    kind: StorageKindName | None = None  # type: ignore[valid-type]
    storage_kind: StorageKindName | None = None  # type: ignore[valid-type]
    ref: text(500) | None = None  # type: ignore[valid-type]
    path: _data_path("invalid_input_path", "Where the step sees it, relative to its workspace") | None = None  # type: ignore[valid-type]
    name: DataName | None = None  # type: ignore[valid-type]

    @model_validator(mode="before")
    @classmethod
    def _one_reference(cls, value: Any) -> Any:
        # An unknown key is refused first (by the declaration), as a person fixes it first.
        if (isinstance(value, dict) and set(value) <= set(cls.model_fields)
                and sum(value.get(key) is not None for key in _REFERENCES) != 1):
            raise BodyError("input_reference_required", "{field} names its artifact with exactly one of "
                            "'artifact' (an id), 'digest' (a blob) or 'image' (an image reference).")
        return value

    def canonical(self, index: int) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        for key in ("artifact", "digest", "image", "kind", "storage_kind", "ref", "path"):
            if getattr(self, key) is not None:
                entry[key] = getattr(self, key)
        if "image" in entry:
            entry["image"] = entry["image"].strip()
        entry["name"] = input_name(self, index)
        return entry


def input_name(item: StepInput, index: int) -> str:
    """An input's name: given, else its path's last segment, else its position."""
    if item.name is not None:
        return item.name
    return item.path.rsplit("/", 1)[-1] if item.path is not None else f"input-{index}"


def _no_repeats(values: list[str], key: str, code: str) -> None:
    seen: dict[str, int] = {}
    for index, value in enumerate(values):
        if value in seen:
            raise BodyError(code, literal(f"{key} '{value}' is used twice (entries {seen[value]} and {index})."),
                            at=f"[{index}].{key}")
        seen[value] = index


def _inputs_unique(items: list[StepInput]) -> list[StepInput]:
    _no_repeats([input_name(item, index) for index, item in enumerate(items)], "name", "duplicate_input_name")
    # Positions among the inputs that name a path (as the refusal has always counted them).
    _no_repeats([item.path for item in items if item.path is not None], "path", "duplicate_input_path")
    return items


def _outputs_unique(items: list[StepOutput] | None) -> list[StepOutput] | None:
    if items:
        _no_repeats([item.name for item in items], "name", "duplicate_output_name")
    return items


class StepOutput(Body):
    """What the executor uploads after a successful command (a file, or a directory as a deterministic tar); a
    declared output that is missing fails the step (``output_missing``)."""

    name: DataName  # type: ignore[valid-type]
    path: _data_path("invalid_output_path", "Relative to the step's workspace")  # type: ignore[valid-type]


class ImageArtifact(Body):
    """An image given as a recorded artifact: Host pins it at submit (``require_oci_image``)."""

    artifact: count(1, MAX_ID, description="The image artifact's id")  # type: ignore[valid-type]


Inputs = Annotated[list[StepInput], Field(max_length=MAX_INPUTS), AfterValidator(_inputs_unique)]
Outputs = Annotated[list[StepOutput], Field(max_length=MAX_OUTPUTS), AfterValidator(_outputs_unique)]
_IMAGE_ARTIFACT = TypeAdapter(ImageArtifact)
_IMAGE_REFERENCE = TypeAdapter(text(500))


# --- the rules a node and a compute step share (a step is an exec node of a compute run) -----------------

def image_rule(value: Any, *, kind: str, runtime: str | None) -> Any:
    """A native exec node takes no image; every other node needs one: a reference, or a recorded artifact."""
    if runtime == NodeRuntime.NATIVE:
        if value is not None:
            raise BodyError("image_not_allowed", "A native exec node runs a host command; it takes no image.")
        return None
    if value is None:
        article = "An" if kind[:1] in "aeiou" else "A"
        raise BodyError("image_required", f"{article} {kind} node with a container needs an image.")
    if isinstance(value, dict):
        return _IMAGE_ARTIFACT.validate_python(value, strict=True)
    return _IMAGE_REFERENCE.validate_python(value, strict=True).strip()


def command_rule(value: Any, *, kind: str) -> Any:
    """An exec node needs a command; any node that gives one names a program (argv[0])."""
    if value is None:
        if kind == NodeKind.EXEC:
            raise BodyError("command_required", "An exec node needs a command (a list of arguments).")
        return None
    if isinstance(value, list) and not value:
        raise BodyError("command_required", "{field} must name a program to run.")
    return value


def env_rule(value: Any) -> Any:
    """``{NAME: value}``: the names checked here (in name order), the values by the declaration."""
    if not isinstance(value, dict):
        raise BodyError("invalid_type", "{field} must be an object of NAME: value strings.")
    if len(value) > MAX_ENV:
        raise BodyError("too_many_items", f"{{field}} has {len(value)} variables; at most {MAX_ENV} are allowed.")
    for name in sorted(value):
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise BodyError("invalid_env_name", literal(f"'{name}' is not an environment variable name."),
                            at=str(name))
    return value


def backoff_rule(value: Any, *, retries: int) -> Any:
    """A backoff only applies to retries; with retries, a backoff given is an object."""
    if not retries:
        if value is not None:
            raise BodyError("backoff_without_retries", "A backoff only applies to retries; set retries (at least 1) "
                            "or leave backoff out.")
        return None
    if value is None:
        raise BodyError("invalid_type", "{field} must be a JSON object.")
    return value


def outputs_rule(value: Any, *, kind: str) -> Any:
    """Only exec nodes declare outputs; an empty list (or null) declares none."""
    if not value:
        return None
    if kind != NodeKind.EXEC:
        raise BodyError("outputs_not_allowed", "Only exec nodes declare outputs.")
    return value


Env = Annotated[dict[str, text(MAX_ARG, blank=True)], Field(max_length=MAX_ENV)]  # type: ignore[valid-type, misc]
Command = Annotated[list[text(MAX_ARG, blank=True)], Field(min_length=1, max_length=MAX_ARGV)]  # type: ignore[valid-type, misc]
Platforms = platforms(MAX_PLATFORMS, blank="{field} must list at least one platform, or be left out.",
                      description="Acceptable os/arch[/variant] in preference order, e.g. linux/amd64")


class PipelineNode(Body):
    """One node of a Canopy Pipeline Graph; it runs after the nodes it ``needs``. Declared in the order its
    fields are checked: a rule on one field reads the fields above it (``info.data``), already valid."""

    id: NodeId  # type: ignore[valid-type]
    kind: NodeKindName = Field(..., description="exec, build_image or deploy")  # type: ignore[valid-type]
    runtime: RuntimeName = Field("container", description="exec nodes only: a container image or a native "  # type: ignore[valid-type]
                                 "host command")
    image: text(500) | ImageArtifact | None = Field(  # type: ignore[valid-type]
        None, validate_default=True, description="Image reference or recorded image artifact (container nodes)")
    command: Command | None = Field(None, validate_default=True, description="argv to run (exec nodes)")  # type: ignore[valid-type]
    env: Env = {}  # type: ignore[valid-type]
    inputs: Inputs = []
    outputs: Outputs | None = Field(None, description="exec nodes only")
    platform: Platforms | None = None  # type: ignore[valid-type]
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

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> Any:
        if not isinstance(value, str) or value not in NODE_KINDS:
            raise BodyError("invalid_node_kind", f"Node kind must be one of: {', '.join(NODE_KINDS)}.")
        return value

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("kind", NodeKind.EXEC) != NodeKind.EXEC:
            raise BodyError("runtime_not_allowed", "Only exec nodes choose a runtime.")
        return value

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any, info: ValidationInfo) -> Any:
        kind = info.data.get("kind")
        if kind is None or (kind == NodeKind.EXEC and "runtime" not in info.data):
            return value  # its kind or runtime is refused already
        return image_rule(value, kind=kind, runtime=info.data["runtime"] if kind == NodeKind.EXEC else None)

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any, info: ValidationInfo) -> Any:
        return value if "kind" not in info.data else command_rule(value, kind=info.data["kind"])

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        return env_rule(value)

    @field_validator("outputs", mode="before")
    @classmethod
    def _outputs(cls, value: Any, info: ValidationInfo) -> Any:
        return value if "kind" not in info.data else outputs_rule(value, kind=info.data["kind"])

    @field_validator("backoff", mode="before")
    @classmethod
    def _backoff(cls, value: Any, info: ValidationInfo) -> Any:
        return value if "retries" not in info.data else backoff_rule(value, retries=info.data["retries"])

    def canonical(self) -> dict[str, Any]:
        """The node in canonical form (defaults filled; keys present as the digests have always seen them)."""
        return node_canonical(self, node_id=self.id, kind=self.kind,
                              runtime=self.runtime if self.kind == NodeKind.EXEC else None,
                              command_given=self.command is not None, reuse=self.reuse, trust=self.trust,
                              family=self.family, grove=self.grove, needs=self.needs)


def node_canonical(parsed: PipelineNode | Any, *, node_id: str, kind: str, runtime: str | None, command_given: bool,
                   reuse: str, trust: str, family: str | None, grove: str | None, needs: list[str]) -> dict[str, Any]:
    """The canonical node of a parsed graph node or compute step (``apps.compute.bodies.ComputeStep``): the
    fields the two share are read from ``parsed`` by name, the rest are given."""
    node: dict[str, Any] = {"id": node_id, "kind": kind}
    if runtime is not None:
        node["runtime"] = runtime
    image = parsed.image
    if image is not None:
        node["image"] = {"artifact": image.artifact} if isinstance(image, ImageArtifact) else image
    if kind == NodeKind.EXEC or command_given:
        node["command"] = list(parsed.command or ())
    node["env"] = {name: (parsed.env or {})[name] for name in sorted(parsed.env or {})}
    node["inputs"] = [item.canonical(index) for index, item in enumerate(parsed.inputs or [])]
    if parsed.outputs:
        node["outputs"] = sorted(({"name": o.name, "path": o.path} for o in parsed.outputs), key=lambda o: o["name"])
    if parsed.platform is not None:
        node["platform"] = list(parsed.platform)
    resources = parsed.resources or StepResources()
    node["resources"] = {"cpu_milli": resources.cpu_milli, "memory_bytes": resources.memory_bytes}
    if parsed.accelerators is not None:
        node["accelerators"] = accelerators_canonical(parsed.accelerators)
    node["timeout_s"] = DEFAULT_TIMEOUT_S if parsed.timeout_s is None else parsed.timeout_s
    if parsed.retries:
        node["retries"] = parsed.retries
        node["backoff"] = (parsed.backoff or StepBackoff()).canonical()
    node["reuse"] = reuse
    node["trust"] = trust
    if family is not None:
        node["family"] = family
    if grove is not None:
        node["grove"] = grove.strip()
    node["needs"] = sorted(set(needs))
    return node


def accelerators_canonical(value: StepAccelerators) -> dict[str, Any]:
    """Stored as the node spelled them (the api is implied again where the requirement is built)."""
    out: dict[str, Any] = {"count": value.count}
    if value.vendor is not None:
        out["vendor"] = value.normal_vendor
    if "min_memory_bytes" in value.model_fields_set:
        out["min_memory_bytes"] = value.min_memory_bytes
    return out


def _graph_problem(nodes: list[PipelineNode]) -> BodyError | None:
    ids = [node.id for node in nodes]
    seen: dict[str, int] = {}
    for index, node_id in enumerate(ids):
        if node_id in seen:
            return BodyError("duplicate_node_id", f"Node id '{node_id}' is used twice (nodes[{seen[node_id]}] and "
                             f"nodes[{index}]).", at=f"nodes[{index}].id")
        seen[node_id] = index
    for index, node in enumerate(nodes):
        for need in sorted(set(node.needs)):
            if need == node.id:
                return BodyError("graph_cycle", f"Node '{need}' needs itself.", at=f"nodes[{index}].needs")
            if need not in seen:
                return BodyError("unknown_node_ref", literal(f"Node '{node.id}' needs '{need}', which is not in the "
                                                             "graph."), at=f"nodes[{index}].needs")
    cycle = find_cycle({node.id: sorted(set(node.needs)) for node in nodes})
    if cycle:
        return BodyError("graph_cycle", f"The graph has a cycle: {' -> '.join(cycle)}.", at="nodes")
    return None


class PipelineGraph(Body):
    """A Canopy Pipeline Graph: its nodes (edges are each node's ``needs``): ids unique, needs known, no cycle."""

    nodes: list[PipelineNode] = Field(..., min_length=1, max_length=MAX_NODES, description="The graph's nodes")

    @field_validator("nodes", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise BodyError("graph_empty", "A graph needs at least one node.")
        return value

    @model_validator(mode="after")
    def _edges(self) -> PipelineGraph:
        problem = _graph_problem(self.nodes)
        if problem is not None:
            raise problem
        return self

    def canonical(self) -> dict[str, Any]:
        return graph_canonical([node.canonical() for node in self.nodes])


def graph_canonical(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The canonical graph of canonical nodes: sorted by id (the digests are taken over it)."""
    return {"nodes": sorted(nodes, key=lambda n: n["id"])}


class RunRequest(Body):
    """``POST pipelines/runs``: the kind of run and a graph."""

    kind: RunKindName = Field(..., description="build, deploy or compute")  # type: ignore[valid-type]
    environment: text(100) | None = None  # type: ignore[valid-type]
    team: text(100) | None = None  # type: ignore[valid-type]
    build_id: text(100) | None = None  # type: ignore[valid-type]
    graph: PipelineGraph


class _Graph(Body):
    """A graph alone, named ``graph`` in its refusals' field paths (a service given a graph body)."""

    graph: PipelineGraph


def run_request(body: Any) -> dict[str, Any]:
    """``POST pipelines/runs`` parsed: ``{"kind", "environment", "team", "build_id", "canonical"}``."""
    parsed = parse(RunRequest, body)
    return {"kind": parsed.kind, "environment": parsed.environment or "", "team": parsed.team or "",
            "build_id": parsed.build_id, "canonical": parsed.graph.canonical()}


def graph_parse(graph: Any) -> dict[str, Any]:
    """A graph body in canonical form, or ``ValidationFailed`` (fields under ``graph``)."""
    return parse(_Graph, {"graph": graph}).graph.canonical()
