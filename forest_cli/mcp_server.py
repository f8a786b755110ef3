"""``forest mcp``: compute, runs, placements, Groves, inventory, the refusal report and plan previews as MCP
tools over stdio (official ``mcp`` SDK).

Each tool calls the same REST API as the CLI with the same token, so the flag, validation and error
codes are Host's own; a refusal comes back as a tool error carrying ``code: detail``. Inputs are typed
(Pydantic models and ``Literal`` choices), so a client sees a real JSON Schema for every tool. A compute
step is Host's own declaration (``apps.compute.bodies.ComputeStep``: exact keys, ``resources`` and
``accelerators`` included, and Host's bounds), and so is a run's graph (``apps.pipelines.bodies.PipelineGraph``),
so the tools' schemas are the API's.
"""
from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Annotated, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from apps.compute.bodies import ComputeStep
from apps.groves.vocabulary import Role, Substrate
from apps.pipelines.bodies import PipelineGraph
from apps.pipelines.vocabulary import RunKind, RunStatus
from apps.placement.vocabulary import SubjectType
from forest_cli.client import JSON, ForestClient, ForestClientError

# The enumerations are Host's own vocabulary (one definition each, stdlib only: no Django needed here). The
# tools' JSON Schemas come from these Literals at run time; a checker cannot read a Literal built from an
# enumeration, so it sees the plain strings they are.
if TYPE_CHECKING:
    RunStatusName = str
    RunKindName = str
    SubstrateName = str
    RoleName = str
    SubjectTypeName = str
else:
    RunStatusName = Literal[tuple(m.value for m in RunStatus)]
    RunKindName = Literal[tuple(m.value for m in RunKind)]
    SubstrateName = Literal[tuple(m.value for m in Substrate)]
    RoleName = Literal[tuple(m.value for m in Role)]
    SubjectTypeName = Literal[tuple(m.value for m in SubjectType)]
T = TypeVar("T")


def server_version() -> str:
    try:
        return version("forest-host")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


def _compute_body(*, name: str, steps: list[ComputeStep], **fields: str | None) -> JSON:
    """The compute request as given: the steps' own keys (no defaults filled in), optional fields left out.
    Not re-validated as a whole here, so Host names what is wrong (``compute_steps_empty``, ...)."""
    return {"name": name, "steps": [step.model_dump(exclude_unset=True) for step in steps],
            **{key: value for key, value in fields.items() if value is not None}}


def build_server(*, host: str | None, token: str | None) -> MCPServer:
    server = MCPServer(name="forest", version=server_version(),
                       instructions="Submit and follow compute jobs and pipeline runs on Forest Groves, preview "
                                    "where work would run, list Groves, accelerators and placements, and explain "
                                    "where work was placed and why (the staff tools need a staff token).")

    def call(fn: Callable[[ForestClient], T]) -> T:
        client = ForestClient(host, token)
        try:
            return fn(client)
        except ForestClientError as exc:
            raise ToolError(f"{exc.code}: {exc.detail}") from None
        finally:
            client.close()

    @server.tool()
    def compute_submit(
            name: Annotated[str, Field(description="Job name")],
            steps: Annotated[list[ComputeStep], Field(description="Steps, run one after another")],
            environment: str | None = None, team: str | None = None,
            grove: Annotated[str | None, Field(description="Pin every step to this Grove (id or slug)")] = None,
    ) -> JSON:
        """Submit a compute job; its steps run one after another on Groves. The request's fields are the
        tool's own arguments (no wrapper object)."""
        body = _compute_body(name=name, steps=steps, environment=environment, team=team, grove=grove)
        return call(lambda c: c.compute_submit(body))

    @server.tool()
    def compute_status(job_id: Annotated[str, Field(description="Compute job id (UUID)")]) -> JSON:
        """A compute job with per-step status, Grove, job id and exit code."""
        return call(lambda c: c.compute_get(job_id))

    @server.tool()
    def compute_cancel(job_id: Annotated[str, Field(description="Compute job id (UUID)")]) -> JSON:
        """Cancel a compute job and its Grove jobs."""
        return call(lambda c: c.compute_cancel(job_id))

    @server.tool()
    def compute_list() -> list[JSON]:
        """Recent compute jobs."""
        return call(lambda c: c.compute_list())

    @server.tool()
    def compute_logs(job_id: Annotated[str, Field(description="Compute job id (UUID)")]) -> list[JSON]:
        """The output of a compute job: each step's Grove job log tail, attempt by attempt."""
        return call(lambda c: c.compute_logs(job_id))

    @server.tool()
    def runs_list(status: RunStatusName | None = None, environment: str | None = None,
                  kind: RunKindName | None = None) -> list[JSON]:
        """Recent pipeline runs, optionally filtered."""
        return call(lambda c: c.runs_list(status=status, environment=environment, kind=kind))

    @server.tool()
    def run_show(run_id: Annotated[str, Field(description="Run id (UUID)")]) -> JSON:
        """One pipeline run with its nodes."""
        return call(lambda c: c.run_get(run_id))

    @server.tool()
    def run_cancel(run_id: Annotated[str, Field(description="Run id (UUID)")]) -> JSON:
        """Cancel a pipeline run and its own Grove jobs."""
        return call(lambda c: c.run_cancel(run_id))

    @server.tool()
    def placements_explain(subject: Annotated[str, Field(
            description="a placement id (17), a compute job id, RUN_ID:NODE or TYPE:ID (pipeline_node:42)")],
            step: Annotated[str | None, Field(description="with a compute job id: only this step")] = None,
    ) -> list[JSON]:
        """Stored placement decisions for one subject, each with its ``verdict`` (placed, would_refuse, refused
        or waiting), why here (``decision.scores``: the policy, weights, the chosen and runner-up Groves' score
        per plugin and total, and a sentence) and every candidate's verdict (eligible or its rule codes, its
        fit, its ``score`` per plugin and total)."""
        return call(lambda c: c.placements_explain(subject, step))

    @server.tool()
    def plan(
            name: Annotated[str | None, Field(description="A compute request: the job name (with steps)")] = None,
            steps: Annotated[list[ComputeStep] | None, Field(description="A compute request: its steps")] = None,
            environment: str | None = None, team: str | None = None,
            grove: Annotated[str | None, Field(description="A compute request: pin every step")] = None,
            graph: Annotated[PipelineGraph | None, Field(description="A run request: the graph (with kind)")] = None,
            kind: Annotated[RunKindName | None, Field(description="A run request: build, deploy or compute")] = None,
    ) -> JSON:
        """Preview where each node would run and why, before submitting. Nothing is stored. Give a compute
        request (name, steps, ...) or a run request (graph, kind), as the tool's own arguments."""
        if graph is not None:
            body = {"graph": graph.model_dump(exclude_unset=True), **({"kind": kind} if kind else {})}
        else:
            body = _compute_body(name=name or "plan", steps=steps or [], environment=environment, team=team,
                                 grove=grove)
        return call(lambda c: c.plan(body))

    @server.tool()
    def groves_list(substrate: SubstrateName | None = None, role: RoleName | None = None,
                    accelerator_api: str | None = None, stale: bool | None = None) -> list[JSON]:
        """Groves with their latest capacity report (staff)."""
        return call(lambda c: c.groves_list(substrate=substrate, role=role, accelerator_api=accelerator_api,
                                            stale=stale))

    @server.tool()
    def inventory() -> JSON:
        """Accelerators by api/vendor/model across Groves, and per-team use this period (staff)."""
        return call(lambda c: c.inventory())

    @server.tool()
    def placements_list(refused: bool = False, grove_slug: str | None = None, code: str | None = None,
                        subject_type: SubjectTypeName | None = None,
                        limit: Annotated[int, Field(ge=1, le=500)] = 50) -> list[JSON]:
        """Stored placements, newest first; refused=true lists only refused / would-refuse ones (staff)."""
        return call(lambda c: c.placements_list(limit=limit, refused=refused or None, grove_slug=grove_slug,
                                                code=code, subject_type=subject_type))

    @server.tool()
    def refusals_report(since: Annotated[str, Field(description="7d, 12h, YYYY-MM-DD or ISO timestamp")] = "14d",
                        until: str | None = None) -> JSON:
        """The "would have refused" report: counts by code, Grove and team, and the daily trend (staff)."""
        return call(lambda c: c.refusals(since=since, until=until))

    @server.tool()
    def ingress_routes(state: Literal["serving", "pending", "failed"] | None = None) -> JSON:
        """Native ingress routes (host name, workload, Grove, mesh upstream, state, nginx's last error), with
        whether host.deploy.native_ingress is on and, when off, why nothing is rendered."""
        return call(lambda c: c.ingress_routes(state=state))

    return server


def serve(*, host: str | None, token: str | None) -> None:
    build_server(host=host, token=token).run("stdio")
