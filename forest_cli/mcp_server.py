"""``forest mcp``: compute, runs and placement operations as MCP tools over stdio (official ``mcp`` SDK).

Each tool calls the same REST API as the CLI with the same token, so the flag, validation and error
codes are Host's own; a refusal comes back as a tool error carrying ``code: detail``.
"""
from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from forest_cli.client import ForestClient, ForestClientError


def build_server(*, host: str | None, token: str | None) -> MCPServer:
    server = MCPServer(name="forest", instructions="Submit and follow compute jobs and pipeline runs on Forest "
                                                   "Groves, and explain where work was placed and why.")

    def call(fn, *args) -> Any:
        client = ForestClient(host, token)
        try:
            return fn(client, *args)
        except ForestClientError as exc:
            raise ToolError(f"{exc.code}: {exc.detail}") from None
        finally:
            client.close()

    @server.tool()
    def compute_submit(request: dict) -> dict:
        """Submit a compute job: {"name", "environment"?, "grove"?, "steps": [{"name", "kind": "container"|"native",
        "image"?, "command": [...], "env"?, "platform"?, "resources"?, "accelerators"?, "timeout_s"?}]}."""
        return call(lambda c: c.compute_submit(request))

    @server.tool()
    def compute_status(job_id: str) -> dict:
        """A compute job with per-step status, Grove, job id and exit code."""
        return call(lambda c: c.compute_get(job_id))

    @server.tool()
    def compute_cancel(job_id: str) -> dict:
        """Cancel a compute job and its Grove jobs."""
        return call(lambda c: c.compute_cancel(job_id))

    @server.tool()
    def compute_list() -> list[dict]:
        """Recent compute jobs."""
        return call(lambda c: c.compute_list())

    @server.tool()
    def runs_list(status: str | None = None, environment: str | None = None) -> list[dict]:
        """Recent pipeline runs, optionally filtered."""
        return call(lambda c: c.runs_list(status=status, environment=environment))

    @server.tool()
    def run_show(run_id: str) -> dict:
        """One pipeline run with its nodes."""
        return call(lambda c: c.run_get(run_id))

    @server.tool()
    def run_cancel(run_id: str) -> dict:
        """Cancel a pipeline run and its own Grove jobs."""
        return call(lambda c: c.run_cancel(run_id))

    @server.tool()
    def placements_explain(subject: str) -> list[dict]:
        """Stored placement decisions for TYPE:ID (pipeline_node:42) or RUN_ID:NODE."""
        return call(lambda c: c.placements_explain(subject))

    return server


def serve(*, host: str | None, token: str | None) -> None:
    build_server(host=host, token=token).run("stdio")
