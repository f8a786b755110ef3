"""``forest``: compute jobs, pipeline runs and placement explanations from a terminal, and ``forest mcp``."""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from forest_cli.client import TERMINAL, ForestClient, ForestClientError

app = typer.Typer(help="Forest: place work on Groves and explain why.", no_args_is_help=True)
compute = typer.Typer(help="Compute jobs: steps run one after another on Groves.", no_args_is_help=True)
runs = typer.Typer(help="Pipeline runs.", no_args_is_help=True)
placements = typer.Typer(help="Placement decisions.", no_args_is_help=True)
app.add_typer(compute, name="compute")
app.add_typer(runs, name="runs")
app.add_typer(placements, name="placements")

out = Console()
err = Console(stderr=True)

Host = Annotated[str | None, typer.Option("--host", envvar="FOREST_HOST", help="Host URL, e.g. https://forest.example")]
Token = Annotated[str | None, typer.Option("--token", envvar="FOREST_TOKEN", help="API token", show_default=False)]


@app.callback()
def main(ctx: typer.Context, host: Host = None, token: Token = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")] = False) -> None:
    ctx.obj = {"host": host, "token": token, "json": as_json}


def _client(ctx: typer.Context) -> ForestClient:
    return ForestClient(ctx.obj["host"], ctx.obj["token"])


def _fail(exc: ForestClientError) -> None:
    err.print(Text("error: ", style="red") + Text(str(exc)), highlight=False, soft_wrap=True)
    raise typer.Exit(2 if exc.code in {"host_missing", "token_missing", "host_unreachable", "usage"} else 1)


def _call(ctx: typer.Context, fn, *args, **kwargs):
    try:
        client = _client(ctx)
        try:
            return fn(client, *args, **kwargs)
        finally:
            client.close()
    except ForestClientError as exc:
        _fail(exc)


def _print_json(data) -> None:
    out.print_json(json.dumps(data, default=str))


def _steps_table(job: dict) -> Table:
    table = Table(title=f"{job['name']}  {job['id']}  [bold]{job['status']}[/bold]", title_justify="left")
    for column in ("step", "status", "try", "wait", "grove", "exit", "job", "reason"):
        table.add_column(column)
    colours = {"succeeded": "green", "failed": "red", "timed_out": "red", "cancelled": "yellow",
               "awaiting": "cyan", "queued": "blue"}
    for step in job["steps"]:
        colour = colours.get(step["status"], "white")
        attempts = f"{step.get('attempt', 1)}/{1 + step.get('retries', 0)}"
        table.add_row(step["name"], f"[{colour}]{step['status']}[/{colour}]", attempts,
                      (step.get("wait_mode") or "-").replace("_", " "), step["grove"] or "-",
                      "-" if step["exit_code"] is None else str(step["exit_code"]), step["job_id"] or "-",
                      step.get("reason") or "")
    return table


def _notes(view: dict, *, item: str) -> list[Text]:
    """The lines under a job or run table: refusals (code and sentence), shadow-mode warnings (code,
    sentence, the flag that would refuse) and the runner pool."""
    lines = []
    for entry in view.get("steps", view.get("nodes", [])):
        refusal = entry.get("refusal")
        if refusal:
            name = entry.get("name") or entry.get("id")
            lines.append(Text("refused ", style="red") + Text(f"{item} {name}: [{refusal['code']}] "
                                                              f"{refusal['detail']}"))
        elif entry.get("status") == "queued" and entry.get("retry_at"):
            name = entry.get("name") or entry.get("id")
            lines.append(Text("retry ", style="blue") + Text(f"{item} {name}: {entry.get('detail') or ''}"))
    for warning in view.get("warnings", []):
        lines.append(Text("warning ", style="yellow") + Text(
            f"{item} {warning.get(item, '?')}: [{warning['code']}] {warning['detail']} "
            f"(would be refused with {warning['flag']} on)"))
    runner = view.get("runner")
    if runner:
        lines.append(Text(f"runner slots: {runner['slots']} ({runner['waiting_in_place']} steps waiting in place "
                          "on Host)", style="dim"))
    return lines


def _job_view(job: dict) -> Group:
    return Group(_steps_table(job), *_notes(job, item="step"))


def _show_job(ctx: typer.Context, job: dict) -> None:
    if ctx.obj["json"]:
        _print_json(job)
    else:
        out.print(_job_view(job), soft_wrap=True)


def _load(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ForestClientError("file_unreadable", f"Cannot read {path}: {exc.strerror}.") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ForestClientError("file_invalid", f"{path} is not valid JSON/YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ForestClientError("file_invalid", f"{path} must hold one object (a compute request).")
    return data


def _watch(ctx: typer.Context, client: ForestClient, job_id: str, interval: float) -> dict:
    job = client.compute_get(job_id)
    if ctx.obj["json"]:
        while job["status"] not in TERMINAL:
            time.sleep(interval)
            job = client.compute_get(job_id)
        _print_json(job)
        return job
    with Live(_job_view(job), console=out, refresh_per_second=4) as live:
        while job["status"] not in TERMINAL:
            time.sleep(interval)
            job = client.compute_get(job_id)
            live.update(_job_view(job))
    return job


def _exit_for(job: dict) -> None:
    if job["status"] in {"failed", "cancelled"}:
        raise typer.Exit(1)


@compute.command("submit")
def compute_submit(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(help="Compute request (JSON or YAML)")] = None,
    cmd: Annotated[str | None, typer.Option("--cmd", help="One-step job: the command line to run")] = None,
    image: Annotated[str | None, typer.Option(help="Image for a --cmd container step")] = None,
    native: Annotated[bool, typer.Option("--native", help="Run --cmd as a native host command")] = False,
    name: Annotated[str | None, typer.Option(help="Job name (default: the file name or 'cmd')")] = None,
    environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
    grove: Annotated[str | None, typer.Option(help="Pin every step to this Grove (id or slug)")] = None,
    platform: Annotated[list[str] | None, typer.Option(help="Acceptable platform (repeatable)")] = None,
    timeout: Annotated[int | None, typer.Option(help="Step timeout in seconds")] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow progress until the job ends")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes with --watch")] = 1.0,
) -> None:
    """Submit a compute job from FILE, or a one-step job with --cmd."""
    if (file is None) == (cmd is None):
        _fail(ForestClientError("usage", "Give either FILE or --cmd (not both)."))
    try:
        if file is not None:
            body = _load(file)
            body.setdefault("name", name or file.stem)
        else:
            step = {"name": "main", "kind": "native" if native else "container", "command": shlex.split(cmd)}
            if image:
                step["image"] = image
            if platform:
                step["platform"] = platform
            if timeout:
                step["timeout_s"] = timeout
            body = {"name": name or "cmd", "steps": [step]}
    except ForestClientError as exc:
        _fail(exc)
    for key, value in (("environment", environment), ("grove", grove)):
        if value:
            body[key] = value

    def run(client: ForestClient) -> dict:
        job = client.compute_submit(body)
        if not watch:
            _show_job(ctx, job)
            return job
        if not ctx.obj["json"]:
            err.print(f"submitted {job['id']}")
        return _watch(ctx, client, job["id"], interval)

    job = _call(ctx, run)
    if watch:
        _exit_for(job)


@compute.command("status")
def compute_status(ctx: typer.Context, job_id: str,
                   watch: Annotated[bool, typer.Option("--watch", help="Live view until the job ends")] = False,
                   interval: Annotated[float, typer.Option(help="Seconds between refreshes")] = 1.0) -> None:
    """Show a compute job's steps (with --watch: a live view until it ends; exit 1 if it failed)."""
    if watch:
        _exit_for(_call(ctx, lambda c: _watch(ctx, c, job_id, interval)))
    else:
        _show_job(ctx, _call(ctx, lambda c: c.compute_get(job_id)))


@compute.command("cancel")
def compute_cancel(ctx: typer.Context, job_id: str) -> None:
    """Cancel a compute job and its Grove jobs."""
    _show_job(ctx, _call(ctx, lambda c: c.compute_cancel(job_id)))


@compute.command("list")
def compute_list(ctx: typer.Context) -> None:
    """Recent compute jobs."""
    jobs = _call(ctx, lambda c: c.compute_list())
    if ctx.obj["json"]:
        _print_json(jobs)
        return
    table = Table("name", "status", "environment", "steps")
    table.add_column("id", no_wrap=True, min_width=36)
    for job in jobs:
        table.add_row(job["name"], job["status"], job["environment"] or "-", str(len(job["steps"])), job["id"])
    out.print(table)


def _run_table(run: dict) -> Table:
    table = Table(title=f"run {run['id']}  {run['kind']}  [bold]{run['status']}[/bold]", title_justify="left")
    for column in ("node", "kind", "status", "wait", "grove", "exit", "reason"):
        table.add_column(column)
    for node in run["nodes"]:
        table.add_row(node["id"], node["kind"], node["status"], node["wait_mode"] or "-", node["grove"] or "-",
                      "-" if node["exit_code"] is None else str(node["exit_code"]), node["reason"])
    return table


@runs.command("list")
def runs_list(ctx: typer.Context, status: Annotated[str | None, typer.Option()] = None,
              environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
              kind: Annotated[str | None, typer.Option()] = None) -> None:
    """Recent pipeline runs."""
    items = _call(ctx, lambda c: c.runs_list(status=status, environment=environment, kind=kind))
    if ctx.obj["json"]:
        _print_json(items)
        return
    table = Table("kind", "status", "environment")
    table.add_column("id", no_wrap=True, min_width=36)
    for run in items:
        table.add_row(run["kind"], run["status"], run["environment"] or "-", run["id"])
    out.print(table)


def _show_run(ctx: typer.Context, run: dict) -> None:
    if ctx.obj["json"]:
        _print_json(run)
    else:
        out.print(Group(_run_table(run), *_notes(run, item="node")), soft_wrap=True)


@runs.command("show")
def runs_show(ctx: typer.Context, run_id: str) -> None:
    """One run with its nodes."""
    _show_run(ctx, _call(ctx, lambda c: c.run_get(run_id)))


@runs.command("create")
def runs_create(ctx: typer.Context, file: Path, kind: Annotated[str, typer.Option()] = "build",
                environment: Annotated[str | None, typer.Option("--environment", "-e")] = None) -> None:
    """Start a run from a Canopy Pipeline Graph file (JSON or YAML: {"nodes": [...]})."""
    try:
        graph = _load(file)
    except ForestClientError as exc:
        _fail(exc)
    body = {"graph": graph, "kind": kind, **({"environment": environment} if environment else {})}
    _show_run(ctx, _call(ctx, lambda c: c.run_create(body)))


@runs.command("cancel")
def runs_cancel(ctx: typer.Context, run_id: str) -> None:
    """Cancel a run and its own Grove jobs."""
    _show_run(ctx, _call(ctx, lambda c: c.run_cancel(run_id)))


@placements.command("explain")
def placements_explain(ctx: typer.Context, subject: Annotated[str, typer.Argument(
        help="TYPE:ID (pipeline_node:42, compute_step:x) or RUN_ID:NODE")]) -> None:
    """Why a subject was placed where it was: Grove, platform, chooser, incompatibilities, candidates."""
    rows = _call(ctx, lambda c: c.placements_explain(subject))
    if ctx.obj["json"]:
        _print_json(rows)
        return
    if not rows:
        err.print(f"no stored placement for {subject}")
        raise typer.Exit(1)
    for row in rows:
        decision = row.get("decision", {})
        out.print(f"[bold]{row.get('subject_type')}:{row.get('subject_id')}[/bold] -> Grove "
                  f"[bold]{row.get('grove_slug')}[/bold] ({row.get('selected_platform')}), "
                  f"chooser {decision.get('chooser', row.get('chooser'))}, enforced {row.get('enforced')}, "
                  f"would refuse {row.get('would_refuse')}")
        if decision.get("summary"):
            out.print(decision["summary"])
        for item in decision.get("incompatibilities", []):
            out.print(f"  [yellow]{item.get('code')}[/yellow]: {item.get('message')}")
        table = Table("grove", "eligible", "why")
        for candidate in decision.get("candidates", []):
            reasons = "; ".join(i.get("code", "") for i in candidate.get("incompatibilities", []))
            table.add_row(candidate.get("grove_slug", "?"), str(candidate.get("eligible")), reasons)
        out.print(table)


@app.command("mcp")
def mcp_command(ctx: typer.Context) -> None:
    """Serve the same operations as MCP tools over stdio (for AI assistants)."""
    from forest_cli.mcp_server import serve

    serve(host=ctx.obj["host"], token=ctx.obj["token"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
