"""``forest``: compute jobs, pipeline runs, placements, Groves and the "would refuse" report from a
terminal; ``forest plan`` previews before submitting; ``forest mcp`` serves the same as MCP tools."""
from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from apps.compute.bodies import ComputeJobRequest, ComputeStep
from apps.core import bodies, localenv
from apps.placement import scoring
from forest_cli import bundles as bundle_format
from forest_cli.client import JSON, TERMINAL, ForestClient, ForestClientError
from forest_cli.tables import Col, table

app = typer.Typer(help="Forest: place work on Groves and explain why.", no_args_is_help=True)
compute = typer.Typer(help="Compute jobs: steps run one after another on Groves.", no_args_is_help=True)
runs = typer.Typer(help="Pipeline runs.", no_args_is_help=True)
placements = typer.Typer(help="Placement decisions: `forest placements [--refused]` lists them (staff); "
                              "`forest placements explain SUBJECT` explains one.")
app.add_typer(compute, name="compute")
app.add_typer(runs, name="runs")
app.add_typer(placements, name="placements")
artifacts = typer.Typer(help="Artifacts: what steps consumed and produced.", no_args_is_help=True)
app.add_typer(artifacts, name="artifacts")
bundles = typer.Typer(help="Native workload bundles: keygen, build, sign, upload, or all three as publish. "
                           "The private key signs; the public key goes to each agent (--trusted-key ID=PATH).",
                      no_args_is_help=True)
app.add_typer(bundles, name="bundles")

out = Console()
err = Console(stderr=True)
# A checkout where `make run` ran: FOREST_HOST (and anything else set there) from var/forest.env, under the env.
localenv.load()

Host = Annotated[str | None, typer.Option("--host", envvar="FOREST_HOST", help="Host URL, e.g. https://forest.example")]
Token = Annotated[str | None, typer.Option("--token", envvar="FOREST_TOKEN", help="API token", show_default=False)]

T = TypeVar("T")


@app.callback()
def main(ctx: typer.Context, host: Host = None, token: Token = None,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")] = False) -> None:
    ctx.obj = {"host": host, "token": token, "json": as_json}
    # The terminal's size is read per command, not once at import: whatever imports the CLI and runs many
    # commands (the MCP server, tests, a pytest-xdist worker that exports COLUMNS=80) gets each command's width.
    for console in (out, err):
        console.size = shutil.get_terminal_size()


def _client(ctx: typer.Context) -> ForestClient:
    return ForestClient(ctx.obj["host"], ctx.obj["token"], on_retry=_say_retry)


def _say_retry(exc: ForestClientError, delay: float, attempt: int) -> None:
    err.print(f"[yellow]{escape(exc.detail)}[/] [{exc.code}] retrying in {delay:g}s ({attempt})")


def _fail(exc: ForestClientError) -> NoReturn:
    err.print(Text("error: ", style="red") + Text(str(exc)), highlight=False, soft_wrap=True)
    raise typer.Exit(2 if exc.code in {"host_missing", "token_missing", "host_unreachable", "usage"} else 1)


def _call(ctx: typer.Context, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        client = _client(ctx)
        try:
            return fn(client, *args, **kwargs)
        finally:
            client.close()
    except ForestClientError as exc:
        _fail(exc)


def _print_json(data: object) -> None:
    out.print_json(json.dumps(data, default=str))


def _steps_table(job: JSON) -> Table:
    colours = {"succeeded": "green", "failed": "red", "timed_out": "red", "cancelled": "yellow",
               "awaiting": "cyan", "queued": "blue"}
    rows = []
    for step in job["steps"]:
        colour = colours.get(step["status"], "white")
        attempts = f"{step.get('attempt', 1)}/{1 + step.get('retries', 0)}"
        rows.append([escape(step["name"]), f"[{colour}]{step['status']}[/{colour}]", attempts,
                     (step.get("wait_mode") or "-").replace("_", " "), step["grove"] or "-",
                     "-" if step["exit_code"] is None else str(step["exit_code"]), step["job_id"] or "-",
                     escape(step.get("reason") or "")])
    return table(["step", "status", "try", "wait", "grove", "exit", Col("job", drop=1, whole=True), "reason"],
                 rows, width=out.width, title=f"{escape(job['name'])}  {job['id']}  [bold]{job['status']}[/bold]  "
                                              f"environment {job.get('environment') or '(none)'}")


def _notes(view: JSON, *, item: str) -> list[Text]:
    """The lines under a job or run table: refusals (code and sentence), shadow-mode warnings (code,
    sentence, the flag that would refuse) and the runner pool."""
    lines = []
    entries: list[JSON] = view["steps"] if "steps" in view else view.get("nodes", [])
    for entry in entries:
        if entry.get("signal"):  # assigned and not claimed (docs/decisions.md "Unclaimed jobs")
            name, signal = entry.get("name") or entry.get("id"), entry["signal"]
            lines.append(Text("unclaimed ", style="red") + Text(f"{item} {name}: [{signal['code']}] "
                                                                f"{signal['detail']}"))
        refusal = entry.get("refusal")
        if refusal:
            name = entry.get("name") or entry.get("id")
            lines.append(Text("refused ", style="red") + Text(f"{item} {name}: [{refusal['code']}] "
                                                              f"{refusal['detail']}"))
        elif entry.get("queue"):
            name, queue = entry.get("name") or entry.get("id"), entry["queue"]
            lines.append(Text("waiting ", style="blue") + Text(
                f"{item} {name}: #{queue['position']} in line for {queue['grove']} [{queue['code']}] "
                f"{queue['detail']} (until {queue['deadline_at']})"))
        elif entry.get("status") == "queued" and entry.get("retry_at"):
            name = entry.get("name") or entry.get("id")
            lines.append(Text("retry ", style="blue") + Text(f"{item} {name}: {entry.get('detail') or ''}"))
    for warning in view.get("warnings", []):
        where = f" on {warning['grove']}" if warning.get("grove") else ""
        lines.append(Text("warning ", style="yellow") + Text(
            f"{item} {warning.get(item, '?')}{where}: [{warning['code']}] {warning['detail']} "
            f"(would be refused with {warning['flag']} on)"))
    runner = view.get("runner")
    if runner:
        lines.append(Text(f"runner slots: {runner['slots']} ({runner['waiting_in_place']} steps waiting in place "
                          "on Host)", style="dim"))
    return lines


def _job_view(job: JSON) -> Group:
    return Group(_steps_table(job), *_notes(job, item="step"))


def _show_job(ctx: typer.Context, job: JSON) -> None:
    if ctx.obj["json"]:
        _print_json(job)
    else:
        out.print(_job_view(job), soft_wrap=True)


def _load(path: Path) -> JSON:
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


def _watch(ctx: typer.Context, client: ForestClient, job_id: str, interval: float) -> JSON:
    job = client.compute_get(job_id)
    if ctx.obj["json"]:
        while job["status"] not in TERMINAL:
            time.sleep(interval)
            job = client.compute_get(job_id)
        _print_json(job)
        return job
    if not out.is_terminal:  # piped or logged: a live view draws nothing there, so print each change instead
        seen = None
        while True:
            state = (job["status"], tuple((step["name"], step["status"], step.get("attempt")) for step in job["steps"]))
            if state != seen:
                seen = state
                out.print(f"{job['status']}: " + ", ".join(f"{name} {status} (attempt {attempt or 1})"
                                                           for name, status, attempt in state[1]), soft_wrap=True)
            if job["status"] in TERMINAL:
                break
            time.sleep(interval)
            job = client.compute_get(job_id)
        out.print(_job_view(job), soft_wrap=True)
        return job
    with Live(_job_view(job), console=out, refresh_per_second=4) as live:
        while job["status"] not in TERMINAL:
            time.sleep(interval)
            job = client.compute_get(job_id)
            live.update(_job_view(job))
    return job


def _exit_for(job: JSON) -> None:
    if job["status"] in {"failed", "cancelled"}:
        raise typer.Exit(1)


def _described(model: type, name: str, before: str = "", after: str = "") -> str:
    """An option's help from Host's declaration of the field it fills (``apps.compute.bodies``), as plain
    text (``[/variant]`` is not markup)."""
    return escape(f"{before}{bodies.describe(model, name)}{after}")


@compute.command("submit")
def compute_submit(
    ctx: typer.Context,
    file: Annotated[Path | None, typer.Argument(help="Compute request (JSON or YAML)")] = None,
    cmd: Annotated[str | None, typer.Option("--cmd", help="One-step job: the command line to run")] = None,
    image: Annotated[str | None, typer.Option(help=_described(ComputeStep, "image", "--cmd: "))] = None,
    native: Annotated[bool, typer.Option("--native", help="Run --cmd as a native host command")] = False,
    name: Annotated[str | None, typer.Option(help=_described(ComputeJobRequest, "name", after=" (default: the "
                                                                  "file name or 'cmd')"))] = None,
    environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
    grove: Annotated[str | None, typer.Option(help=_described(ComputeJobRequest, "grove"))] = None,
    platform: Annotated[list[str] | None, typer.Option(
        help=_described(ComputeStep, "platform", "--cmd: ", " (repeatable)"))] = None,
    timeout: Annotated[int | None, typer.Option(help=_described(ComputeStep, "timeout_s", "--cmd: "))] = None,
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
            step: JSON = {"name": "main", "kind": "native" if native else "container", "command": shlex.split(cmd)}
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

    def run(client: ForestClient) -> JSON:
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
def compute_list(ctx: typer.Context,
                 name: Annotated[str | None, typer.Option(help="Name contains")] = None,
                 status: Annotated[str | None, typer.Option(help="pending | running | succeeded | failed | "
                                                                 "cancelled")] = None,
                 environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
                 team: Annotated[str | None, typer.Option()] = None) -> None:
    """Recent compute jobs (yours, or your teams')."""
    jobs = _call(ctx, lambda c: c.compute_list(name=name, status=status, environment=environment, team=team))
    if ctx.obj["json"]:
        _print_json(jobs)
        return
    out.print(table(["name", "status", "environment", "steps", Col("id", whole=True)],
                    [[escape(job["name"]), job["status"], job["environment"] or "(none)", str(len(job["steps"])),
                      job["id"]] for job in jobs], width=out.width))


def _run_table(run: JSON) -> Table:
    return table(["node", "kind", "status", "wait", "grove", "exit", "reason"],
                 [[escape(node["id"]), node["kind"], node["status"], node["wait_mode"] or "-", node["grove"] or "-",
                   "-" if node["exit_code"] is None else str(node["exit_code"]), escape(node["reason"])]
                  for node in run["nodes"]],
                 width=out.width, title=f"run {run['id']}  {run['kind']}  [bold]{run['status']}[/bold]")


@runs.command("list")
def runs_list(ctx: typer.Context, status: Annotated[str | None, typer.Option()] = None,
              environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
              kind: Annotated[str | None, typer.Option()] = None) -> None:
    """Recent pipeline runs."""
    items = _call(ctx, lambda c: c.runs_list(status=status, environment=environment, kind=kind))
    if ctx.obj["json"]:
        _print_json(items)
        return
    out.print(table(["kind", "status", "environment", Col("id", whole=True)],
                    [[run["kind"], run["status"], run["environment"] or "(none)", run["id"]] for run in items],
                    width=out.width))


def _show_run(ctx: typer.Context, run: JSON) -> None:
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


def _artifact_line(artifact: JSON) -> str:
    size = "-" if artifact.get("size") is None else f"{artifact['size']} B"
    return f"#{artifact['id']} {artifact['digest'][:19]} {artifact['storage_kind']} {size} {artifact['reference']}"


def _uses_table(title: str, uses: list[JSON]) -> Table:
    return table(["run", "node", "name", "artifact"],
                 [[use["run_id"], escape(use["node"]), escape(use["name"]), escape(_artifact_line(use["artifact"]))]
                  for use in uses], width=out.width, title=title)


def _lineage_tree(body: JSON) -> list[Text]:
    """Every step reached, with what it consumed (<-) and produced (->)."""
    names = {a["id"]: a for a in body["artifacts"]}
    steps: dict[str, list[str]] = {}
    for edge in body["edges"]:
        arrow = "<-" if edge["role"] == "input" else "->"
        artifact = _artifact_line(names[edge["artifact_id"]])
        steps.setdefault(edge["step"], []).append(f"  {arrow} {edge['name']}: {artifact}")
    lines = [Text(f"lineage (depth {body['depth']}{', truncated' if body['truncated'] else ''}):", style="bold")]
    for step, uses in steps.items():
        lines.append(Text(step))
        lines.extend(Text(use) for use in uses)
    return lines


@artifacts.command("lineage")
def artifacts_lineage(
    ctx: typer.Context,
    artifact: Annotated[int | None, typer.Argument(help="an artifact id: its producer and consumers")] = None,
    run: Annotated[str | None, typer.Option("--run", help="a run id: what each of its nodes consumed and produced")]
    = None,
    depth: Annotated[int | None, typer.Option(help="hops each way (1 to 5)")] = None,
) -> None:
    """An artifact's lineage (who produced it, who consumed it, transitively), or a run's inputs and outputs."""
    if (artifact is None) == (run is None):
        _fail(ForestClientError("usage", "Name an artifact id, or --run RUN_ID (one of the two)."))
    if run is not None:
        body = _call(ctx, lambda c: c.run_lineage(run))
        if ctx.obj["json"]:
            _print_json(body)
            return
        out.print(_uses_table(f"run {run}: inputs", body["inputs"]))
        out.print(_uses_table(f"run {run}: outputs", body["outputs"]))
        return
    body = _call(ctx, lambda c: c.artifact_lineage(artifact, depth=depth))
    if ctx.obj["json"]:
        _print_json(body)
        return
    out.print(Text(_artifact_line(body["artifact"]), style="bold"), soft_wrap=True)
    out.print(_uses_table("produced by", body["producers"]))
    out.print(_uses_table("consumed by", body["consumers"]))
    out.print(Group(*_lineage_tree(body)), soft_wrap=True)


@placements.command("explain")
def placements_explain(ctx: typer.Context, subject: Annotated[str, typer.Argument(
        help="a placement id (17), a compute job id, RUN_ID:NODE or TYPE:ID (pipeline_node:42)")],
        step: Annotated[str | None, typer.Argument(help="with a compute job id: only this step")] = None) -> None:
    """Why a subject was placed where it was: Grove, platform, chooser, incompatibilities, candidates."""
    rows = _call(ctx, lambda c: c.placements_explain(subject, step))
    if ctx.obj["json"]:
        _print_json(rows)
        return
    if not rows:
        err.print(f"no stored decision for {subject}")
        raise typer.Exit(1)
    for row in rows:
        decision = row.get("decision", {})
        if row.get("outcome", "placed") != "placed":
            out.print(f"[bold]{row.get('subject_type')}:{row.get('subject_id')}[/bold] {_verdict(row, codes=False)} "
                      + escape(f"[{row.get('code')}] " + (decision.get("detail", "")
                                                          or (row.get("verdict") or {}).get("sentence", ""))))
            _candidates_table(decision)
            continue
        out.print(f"[bold]{row.get('subject_type')}:{row.get('subject_id')}[/bold] -> Grove "
                  f"[bold]{row.get('grove_slug')}[/bold] ({row.get('selected_platform')}), "
                  f"chooser {decision.get('chooser', row.get('chooser'))}, enforced {row.get('enforced')}, "
                  f"would refuse {row.get('would_refuse')}")
        if decision.get("summary"):
            out.print(decision["summary"])
        if (decision.get("scores") or {}).get("why"):
            out.print(escape("Why here: " + decision["scores"]["why"]))
        for item in decision.get("incompatibilities", []):
            out.print(f"  [yellow]{item.get('code')}[/yellow]: {item.get('message')}")
        _candidates_table(decision)


def _score_cell(stored: JSON | None) -> str:
    """Every plugin's score and the total ("—" when the candidate was not scored: not eligible, or no room)."""
    cells = scoring.cells(stored)
    if stored is None:
        return cells[-1]
    return f"{cells[-1]} = " + ", ".join(f"{name} {cell}" for name, cell in zip(scoring.NAMES, cells, strict=False))


def _candidates_table(decision: JSON) -> None:
    """Each candidate Grove's verdict: compatible or not and why, its resource fit (now/later/never), and its
    score per plugin and total (every column, zeros shown; "—" for a candidate that was not scored)."""
    rows = []
    for candidate in decision.get("candidates", []):
        fit = candidate.get("fit") or {}
        reasons = [i.get("code", "") for i in candidate.get("incompatibilities", [])]
        if fit.get("code"):
            reasons.append(f"{fit['code']}: {fit.get('message', '')}")
        rows.append([candidate.get("grove_slug", "?"), str(candidate.get("eligible")), fit.get("state", "-"),
                     _score_cell(candidate.get("score")), escape("; ".join(reasons))])
    out.print(table(["grove", "eligible", "fit", "score: total = weighted plugins", "why not"], rows,
                    width=out.width))


@compute.command("logs")
def compute_logs(ctx: typer.Context, job_id: str) -> None:
    """The output of a compute job: each step's Grove job log tail, attempt by attempt."""
    items = _call(ctx, lambda c: c.compute_logs(job_id))
    if ctx.obj["json"]:
        _print_json(items)
        return
    if not items:
        err.print("no Grove job has run for this compute job yet")
    for item in items:
        code = "-" if item["exit_code"] is None else item["exit_code"]
        out.print(f"[bold]== {item['step']}[/bold] (attempt {item['attempt']}) on {item['grove']}: "
                  f"{item['status']}, exit {code}", highlight=False)
        for line in item["log_tail"] or ["(no output reported)"]:
            out.print(line, markup=False, highlight=False)


# --- staff reads ----------------------------------------------------------------------------------

def _age(iso: str | None) -> str:
    if not iso:
        return "never"
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _gib(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1024**3:.1f}".removesuffix(".0") + " GiB"  # 23.5 GiB, not 23.5401 GiB


def _grove_state(grove: JSON) -> str:
    """A Grove's state as the pages show it: stale or fresh, not ready (live, not polling: placement passes it
    over), simulated (a demo Grove: nothing runs its jobs)."""
    words = ["[red]stale[/red]" if grove["stale"] else "[green]fresh[/green]"]
    if not grove["stale"] and not grove.get("ready", True):
        words.append("[red]not ready[/red]")
    if grove.get("simulated"):
        words.append("[yellow]simulated[/yellow]")
    return " ".join(words)


@app.command("groves")
def groves_list(
    ctx: typer.Context,
    substrate: Annotated[str | None, typer.Option(help="kubernetes | native")] = None,
    role: Annotated[str | None, typer.Option(help="build | runtime | compute")] = None,
    api: Annotated[str | None, typer.Option("--api", help="Accelerator API (cuda, metal)")] = None,
    stale: Annotated[bool | None, typer.Option("--stale/--fresh", help="Only stale / only fresh Groves")] = None,
    search: Annotated[str | None, typer.Option("--search", "-q", help="Slug or name contains")] = None,
) -> None:
    """Groves with their last report (staff)."""
    rows = _call(ctx, lambda c: c.groves_list(substrate=substrate, role=role, accelerator_api=api, stale=stale,
                                              q=search))
    if ctx.obj["json"]:
        _print_json(rows)
        return
    cells = []
    for grove in rows:
        units = grove["capacity"]["placement_units"]
        cpu = (f"{sum(u['cpu_milli']['free'] for u in units) / 1000:g}/"
               f"{sum(u['cpu_milli']['allocatable'] for u in units) / 1000:g}")
        mem = (f"{_gib(sum(u['memory_bytes']['free'] for u in units))}/"
               f"{_gib(sum(u['memory_bytes']['allocatable'] for u in units))}")
        accelerators = ", ".join(sorted({f"{a['model']} ({','.join(a['apis'])})"
                                         for a in grove["capacity"]["accelerators"]})) or "-"
        cells.append([grove["slug"], grove["substrate"], ", ".join(grove["roles"]), ", ".join(grove["platforms"]),
                      cpu, mem, escape(accelerators), f"{_grove_state(grove)} {_age(grove['last_heartbeat_at'])}"])
    out.print(table(["grove", "substrate", "roles", Col("platforms", drop=1),
                     "cpu free/alloc", "memory free/alloc", "accelerators", "report"], cells, width=out.width))


@app.command("ingress")
def ingress(ctx: typer.Context,
            state: Annotated[str | None, typer.Option(help="serving | pending | failed")] = None) -> None:
    """Native ingress routes: host name, workload, Grove, mesh upstream, state and nginx's last error."""
    body = _call(ctx, lambda c: c.ingress_routes(state=state))
    if ctx.obj["json"]:
        _print_json(body)
        return
    if not body["enabled"]:
        out.print(f"[yellow]{body['reason']}[/yellow]")
    colours = {"serving": "green", "failed": "red"}
    rows = []
    for route in body["results"]:
        colour = colours.get(route["state"], "yellow")
        rows.append([f"{route['hostname']}{route['path_prefix'] if route['path_prefix'] != '/' else ''}",
                     route["workload"], route["grove"] or "-", route["upstream"],
                     f"[{colour}]{route['state']}[/{colour}]", _age(route["state_changed_at"]),
                     escape(route["last_error"] or "-")])
    out.print(table(["host name", "workload", "grove", Col("mesh upstream", drop=1), "state", "since", "last error"],
                    rows, width=out.width))


def _bundle_fail(exc: bundle_format.BundleError) -> NoReturn:
    err.print(Text("error: ", style="red") + Text(f"{exc.detail} [{exc.code}]"), highlight=False, soft_wrap=True)
    raise typer.Exit(1)


KeyId = Annotated[str, typer.Option("--key-id", help="the id agents know the public key by (--trusted-key ID=PATH)")]
Team = Annotated[str | None, typer.Option(help="the team that may read it (a member of one team may leave it out)")]
Platform = Annotated[str | None, typer.Option(help="the bundle's os/arch[/variant], if it has one")]


@bundles.command("keygen")
def bundles_keygen(name: Annotated[Path, typer.Argument(help="writes NAME.key (private) and NAME.pem (public)")]
                   = Path("release")) -> None:
    """A new Ed25519 signing key pair: NAME.key signs (keep it private), NAME.pem goes to the agents."""
    private, public = name.with_name(name.name + ".key"), name.with_name(name.name + ".pem")
    try:
        bundle_format.keygen(private, public)
    except bundle_format.BundleError as exc:
        _bundle_fail(exc)
    err.print(f"private key {private} (signs bundles: `forest bundles publish DIR --key {private}`)\n"
              f"public key  {public} (verifies: `forest-agent run --trusted-key ID={public}`)", highlight=False,
              soft_wrap=True)


@bundles.command("build")
def bundles_build(directory: Path, output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="the tar.gz to write (default DIRECTORY.tar.gz)")] = None) -> None:
    """Pack DIRECTORY as a reproducible tar.gz; prints its digest."""
    try:
        data = bundle_format.build(directory)
    except bundle_format.BundleError as exc:
        _bundle_fail(exc)
    target = output or directory.resolve().with_name(directory.resolve().name + ".tar.gz")
    target.write_bytes(data)
    err.print(f"wrote {target} ({len(data)} bytes)", highlight=False, soft_wrap=True)
    print(bundle_format.digest_of(data))


@bundles.command("sign")
def bundles_sign(bundle: Path, key: Annotated[Path, typer.Option(help="the PRIVATE key (e.g. release.key)")]) -> None:
    """Sign BUNDLE's digest with the private KEY; writes BUNDLE.sig and prints the signature."""
    try:
        signature = bundle_format.sign(bundle_format.load_private_key(key),
                                       bundle_format.digest_of(_read_bundle(bundle)))
    except bundle_format.BundleError as exc:
        _bundle_fail(exc)
    bundle.with_name(bundle.name + ".sig").write_text(signature + "\n")
    print(signature)


def _read_bundle(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise bundle_format.BundleError("bundle_unreadable", f"Cannot read bundle {path}: {exc.strerror}.") from None


def _upload(ctx: typer.Context, data: bytes, *, signature: str, key_id: str, team: str | None,
            platform: str | None) -> None:
    digest = bundle_format.digest_of(data)
    artifact = _call(ctx, lambda c: c.blob_upload(data, digest=digest, media_type=bundle_format.MEDIA_TYPE,
                                                  signature=signature, key_id=key_id, team=team, platform=platform))
    if ctx.obj["json"]:
        _print_json(artifact)
        return
    err.print(f"uploaded artifact {artifact.get('id')}, signed by key {key_id!r}; its digest (below) is a "
              f"workload's \"bundle_digest\"", highlight=False, soft_wrap=True)
    print(digest)


@bundles.command("upload")
def bundles_upload(ctx: typer.Context, bundle: Path, key_id: KeyId,
                   signature: Annotated[str | None, typer.Option(help="base64 (default: BUNDLE.sig)")] = None,
                   team: Team = None, platform: Platform = None) -> None:
    """Upload a signed BUNDLE into Host's artifacts; prints its digest (the workload's bundle_digest)."""
    try:
        data = _read_bundle(bundle)
        if signature is None:
            sig_path = bundle.with_name(bundle.name + ".sig")
            if not sig_path.is_file():
                raise bundle_format.BundleError("bundle_unsigned", f"{sig_path} is missing: run `forest bundles "
                                                                   f"sign {bundle} --key KEY` first.")
            signature = sig_path.read_text().strip()
    except bundle_format.BundleError as exc:
        _bundle_fail(exc)
    _upload(ctx, data, signature=signature, key_id=key_id, team=team, platform=platform)


@bundles.command("publish")
def bundles_publish(ctx: typer.Context, directory: Path,
                    key: Annotated[Path, typer.Option(help="the PRIVATE key (e.g. release.key)")],
                    key_id: KeyId, team: Team = None, platform: Platform = None) -> None:
    """build + sign + upload in one: prints the digest to name as the workload's bundle_digest."""
    try:
        private = bundle_format.load_private_key(key)
        data = bundle_format.build(directory)
    except bundle_format.BundleError as exc:
        _bundle_fail(exc)
    _upload(ctx, data, signature=bundle_format.sign(private, bundle_format.digest_of(data)), key_id=key_id,
            team=team, platform=platform)


@app.command("inventory")
def inventory(ctx: typer.Context) -> None:
    """Accelerators across Groves by api/vendor/model, and each team's use this period (staff)."""
    body = _call(ctx, lambda c: c.inventory())
    if ctx.obj["json"]:
        _print_json(body)
        return
    rows = []
    for g in [*body["accelerators"], *body.get("simulated", [])]:
        groves = str(g["groves"]) + (f" ({g['groves_not_ready']} not ready)" if g.get("groves_not_ready") else "")
        model = escape(g["model"]) + (" [yellow](simulated: not inventory)[/yellow]" if g.get("simulated") else "")
        rows.append([g["api"], escape(g["vendor"]), model, f"{_gib(g['memory_bytes'])} {g['memory_kind']}",
                     g["share_mode"], groves, str(g["items"]), f"{g['free']}/{g['allocatable']}"])
    out.print(table(["api", "vendor", "model", "memory", "sharing", "groves", "items", "devices free/alloc"], rows,
                    width=out.width, title="Accelerators"))
    teams = [[escape(t["team"]), f"{t['api'] or 'any'}/{t['vendor'] or 'any'}",
              f"{t['concurrent']}/{t['max_concurrent'] if t['max_concurrent'] is not None else '-'}",
              f"{t['used_accelerator_seconds']:g}/{t['budget_accelerator_seconds'] or '-'}", t["period"],
              str(t["refusals"])] for t in body["teams"]]
    out.print(table(["team", "api/vendor", "in use/max", "used/budget (accelerator-s)", "period", "refusals"], teams,
                    width=out.width, title="Teams"))


@placements.callback(invoke_without_command=True)
def placements_list(
    ctx: typer.Context,
    refused: Annotated[bool, typer.Option("--refused", help="Only refused / would-refuse placements")] = False,
    outcome: Annotated[str | None, typer.Option(help="placed, waiting (for capacity) or refused")] = None,
    grove: Annotated[str | None, typer.Option(help="Grove slug")] = None,
    code: Annotated[str | None, typer.Option(help="Incompatibility code")] = None,
    subject_type: Annotated[str | None, typer.Option("--subject-type")] = None,
    platform: Annotated[str | None, typer.Option()] = None,
    team: Annotated[str | None, typer.Option()] = None,
    since: Annotated[str | None, typer.Option(help="ISO timestamp: placed at or after")] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows")] = 50,
) -> None:
    """Stored placements, newest first (staff); `explain SUBJECT` explains one."""
    if ctx.invoked_subcommand is not None:
        return
    rows = _call(ctx, lambda c: c.placements_list(limit=limit, refused=refused or None, outcome=outcome,
                                                  grove_slug=grove, code=code,
                                                  subject_type=subject_type, platform=platform, team=team,
                                                  created_after=since))
    if ctx.obj["json"]:
        _print_json(rows)
        return
    # The id, the verdict and the age never wrap; platform and chooser are left out first when narrow.
    cells = [[str(row["id"]), escape(row["subject"].get("label") or f"{row['subject_type']}:{row['subject_id']}"),
              row["subject"].get("status") or "-", row["grove_slug"] or "-", row["selected_platform"] or "-",
              row["chooser"], _verdict(row, first_code_only=True), _age(row["created_at"])] for row in rows]
    out.print(table([Col("id", whole=True), "subject", "status", "grove", Col("platform", drop=2),
                     Col("chooser", drop=1), Col("verdict", whole=True), Col("placed", whole=True)], cells,
                    width=out.width))


_VERDICT_STYLE = {"placed": "green", "would_refuse": "yellow", "refused": "red", "waiting": "yellow"}


def _verdict(row: JSON, *, codes: bool = True, first_code_only: bool = False) -> str:
    """Host's own rendering of the outcome (``verdict``: apps/placement/outcome.py), coloured by its key;
    ``first_code_only`` (a table cell): the first code and how many more (``explain`` lists them all)."""
    shown = row.get("verdict") or {"key": row.get("outcome", "placed"), "label": row.get("outcome", "placed"),
                                   "codes": [row["code"]] if row.get("code") else []}
    style = _VERDICT_STYLE.get(shown["key"], "white")
    label = f"[{style}]{escape(shown['label'])}[/{style}]"
    found = list(shown["codes"])
    if not codes or not found:
        return label
    if first_code_only and len(found) > 1:
        return f"{label} {escape(found[0])} +{len(found) - 1}"
    return f"{label} " + escape(" ".join(found))


@app.command("refusals")
def refusals(
    ctx: typer.Context,
    since: Annotated[str, typer.Option(help="Window start: 7d, 12h, 2026-01-31 or an ISO timestamp")] = "14d",
    until: Annotated[str | None, typer.Option(help="Window end (default now)")] = None,
) -> None:
    """The "would have refused" report: counts by code, Grove and team over a window, and the daily trend."""
    body = _call(ctx, lambda c: c.refusals(since=since, until=until))
    if ctx.obj["json"]:
        _print_json(body)
        return
    out.print(f"[bold]{body['total']}[/bold] placements refused or would be refused between {body['since']} and "
              f"{body['until']}: {body.get('refused', 0)} refused, {body.get('would_refuse', 0)} would refuse; "
              f"{body.get('groves', 0)} Groves involved"
              + (f" (and {body['no_grove']} refused onto no Grove)" if body.get("no_grove") else ""),
              highlight=False)
    for title, key, name in (("by code", "by_code", "code"), ("by Grove", "by_grove", "grove"),
                             ("by team", "by_team", "team"), ("nodes refused at dispatch", "node_refusals",
                                                              "reason")):
        out.print(table([name, "count"], [[escape(str(item[name])), str(item["count"])] for item in body[key]],
                        width=out.width, title=title))
    peak = max((day["count"] for day in body["trend"]), default=0) or 1
    for day in body["trend"]:
        out.print(f"{day['day']}  {'#' * round(30 * day['count'] / peak):<30} {day['count']}", highlight=False)


@app.command("plan")
def plan(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A compute request (with steps) or a pipeline graph (JSON/YAML)")],
    kind: Annotated[str, typer.Option(help="Run kind for a pipeline graph")] = "build",
    environment: Annotated[str | None, typer.Option("--environment", "-e")] = None,
) -> None:
    """Preview where each node would run, and why, before submitting (nothing is stored); exit 1 if refused."""
    try:
        data = _load(file)
    except ForestClientError as exc:
        _fail(exc)
    # A compute request carries steps; anything else is a pipeline graph.
    body = {**data, "name": data.get("name") or file.stem} if "steps" in data else {"graph": data, "kind": kind}
    if environment:
        body["environment"] = environment
    result = _call(ctx, lambda c: c.plan(body))
    if ctx.obj["json"]:
        _print_json(result)
    else:
        enforced = "on" if result["enforced"] else "off (shadow: incompatibilities are recorded, not refused)"
        out.print(f"{result['kind']} plan, compatibility enforcement {enforced}", highlight=False)
        rows = []
        for node in result["nodes"]:
            if node["refusal"]:
                verdict = f"[red]refused[/red] {node['refusal']['code']}: {node['refusal']['detail']}"
            elif node["would_refuse"]:
                verdict = "[yellow]would refuse[/yellow] " + "; ".join(
                    f"{i['code']}: {i['message']}" for i in node["incompatibilities"])
            else:
                verdict = "[green]ok[/green] " + (node["summary"] or "")
            rows.append([escape(node["node"]), ", ".join(node["needs"]) or "-", node["grove"] or "-",
                         node["platform"] or "-", node["chooser"], verdict])
        out.print(table(["node", "needs", "grove", "platform", Col("chooser", drop=1), "verdict"], rows,
                        width=out.width))
    if not result["placeable"]:
        raise typer.Exit(1)


@app.command("mcp")
def mcp_command(ctx: typer.Context) -> None:
    """Serve the same operations as MCP tools over stdio (for AI assistants)."""
    from forest_cli.mcp_server import serve

    serve(host=ctx.obj["host"], token=ctx.obj["token"])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
