"""Staff pages. Each list declares its queryset, filterset (the API's own) and table; one URL renders the
full page, only the results for an htmx request (filters, sorting and paging swap in place and push
the URL, so every view is a shareable link), or CSV with ``?_export=csv``.

Access: a staff login with a role (``apps.core.permissions.is_staff_user``: viewer and up) and the
observability flag on. What a page shows is what the acting user may see (``apps.staff.selectors``, each
taking the user first); an action calls the same actor-checked service as the API
(``pipeline_run_cancel_as``) and writes the same audit event. A refusal is the API's coded refusal,
rendered (403 ``team_forbidden`` / ``permission_required``, 404 ``run_not_found``); nothing changes.
"""
from __future__ import annotations

import csv
import hmac
from datetime import datetime, time, timedelta
from functools import wraps

import prometheus_client
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_http_methods
from django_tables2 import RequestConfig
from django_tables2.paginators import LazyPaginator

from apps.accounts.choices import AuditVia
from apps.accounts.selectors import authorize, may
from apps.accounts.services import audit_record
from apps.artifacts.selectors import artifact_get, artifact_lineage, run_lineage
from apps.compute.filtersets import ComputeJobFilterSet
from apps.core.counting import MAX_OFFSET_ROWS, capped_count
from apps.core.csvsafe import csv_row
from apps.core.errors import ForestError
from apps.core.permissions import StaffAccess, is_staff_user, staff_access
from apps.core.selectors import process_liveness
from apps.dispatch.selectors import job_signal
from apps.flags.registry import FLAGS
from apps.flags.selectors import is_enabled
from apps.groves.filtersets import GroveFilterSet
from apps.ingress.filtersets import IngressRouteFilterSet
from apps.ingress.selectors import ingress_status, routes_visible
from apps.pipelines.filtersets import RunFilterSet
from apps.pipelines.services import pipeline_run_cancel_as
from apps.placement import scoring
from apps.placement.filtersets import ExecutionPlacementFilterSet
from apps.placement.selectors import placement_decision, placement_outcome
from apps.staff import capabilities, charts, selectors
from apps.staff.metrics import forest_registry
from apps.staff.tables import ComputeJobTable, GroveTable, IngressRouteTable, PlacementTable, RunTable

FLAG = "host.staff.execution_observability"
PER_PAGE_CHOICES = (25, 50, 100, 250)
MAX_PER_PAGE = 500
# A CSV export stops here: staff want a spreadsheet, not a database dump.
EXPORT_MAX_ROWS = 50_000
REPORT_MAX_DAYS = 366


def observability_page(view):
    """Anonymous or a non-staff account → the login page with Django's "not authorised" notice (as admin
    does); a staff account without a role that reads Groves → 403; flag off → a 404 page naming the flag."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        access = staff_access(request.user)
        if access == StaffAccess.SIGN_IN:
            return redirect_to_login(request.get_full_path(), reverse(settings.LOGIN_URL))
        if access == StaffAccess.NO_ROLE:
            raise PermissionDenied("This staff account holds no role that reads Groves (viewer and up).")
        if not is_enabled(FLAG):
            return render(request, "staff/feature_off.html", {"flag": FLAG}, status=404)
        try:
            return view(request, *args, **kwargs)
        except ForestError as refused:  # the API's refusal, as a page: same status, code and sentence
            return render(request, "staff/refused.html", {"error": refused}, status=refused.status)

    return wrapper


def _per_page(request: HttpRequest) -> int:
    try:
        return max(1, min(MAX_PER_PAGE, int(request.GET.get("per_page", 50))))
    except ValueError:
        return 50


def _too_deep(request: HttpRequest) -> str:
    """The error for a page past ``MAX_OFFSET_ROWS``, or "" for one within it."""
    try:
        page = int(request.GET.get("page", 1))
    except ValueError:
        return ""
    if (page - 1) * _per_page(request) < MAX_OFFSET_ROWS:
        return ""
    return (f"Page {page} starts past the first {MAX_OFFSET_ROWS:,} rows, which are as deep as these lists go: "
            "narrow the filters (a time range, a Grove, a team) to reach older rows.")


def _paginate(request: HttpRequest, table) -> None:
    # LazyPaginator: no COUNT(*) over a million rows; "next" is known by reading one row more.
    RequestConfig(request, paginate={"per_page": _per_page(request), "paginator_class": LazyPaginator}).configure(table)


def _table_page(request: HttpRequest, *, queryset, filterset_class, table_class, template: str,
                describe=None, extra: dict | None = None, export_name: str = "export") -> HttpResponse:
    """Filter with the API's filterset; an invalid value (or a page too deep) answers 400 with the errors
    shown, never an unfiltered list. ``describe`` fills per-page context for the table (one query for the page)."""
    filterset = filterset_class(request.GET, queryset=queryset)
    status = 200
    page_error = _too_deep(request)
    if not filterset.is_valid() or page_error:
        status = 400
        rows = queryset.none()
    else:
        rows = filterset.qs
    exclude = _excluded_columns(request, table_class)
    if request.GET.get("_export") == "csv" and status == 200:
        ordered = table_class(rows, order_by=request.GET.get("sort") or None).data.data
        return _csv(table_class(list(ordered[:EXPORT_MAX_ROWS]), exclude=exclude), export_name, describe)
    table = table_class(rows, exclude=exclude)
    _paginate(request, table)
    total = _capped_total(rows) if status == 200 else None
    if describe is not None:
        describe(table, [row.record for row in table.page.object_list])
    context = {"filter": filterset, "table": table, "per_page_choices": PER_PAGE_CHOICES, "total": total,
               "per_page": _per_page(request), "page_error": page_error, "column_choices": [
                   (name, column.verbose_name or name, name not in exclude)
                   for name, column in table_class.base_columns.items()], **(extra or {})}
    return render(request, "staff/_results.html" if request.htmx else template, context, status=status)


def _capped_total(rows) -> str:
    """The number of rows matching, exact up to the cap, else "more than" it (apps/core/counting.py)."""
    found, capped = capped_count(rows)
    return f"more than {found:,}" if capped else f"{found:,}"


def _excluded_columns(request: HttpRequest, table_class) -> list[str]:
    """Column choice: ``?col=a&col=b`` shows only those (unknown names are ignored); none given: all."""
    chosen = [name for name in request.GET.getlist("col") if name in table_class.base_columns]
    if not chosen:
        return []
    return [name for name in table_class.base_columns if name not in chosen]


def _csv(table, name: str, describe=None) -> StreamingHttpResponse:
    if describe is not None:
        describe(table, [row.record for row in table.rows])

    class Echo:
        def write(self, value):
            return value

    writer = csv.writer(Echo())
    response = StreamingHttpResponse((writer.writerow(csv_row(row)) for row in table.as_values()),
                                     content_type="text/csv")
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="forest-{name}-{stamp}.csv"'
    return response


def _describe_placements(table, records) -> None:
    table.subjects = selectors.subjects_describe(records)


def _describe_runs(table, records) -> None:
    table.counts = selectors.run_node_counts(record.pk for record in records)
    table.jobs = selectors.compute_jobs_by_run(record.pk for record in records)


def _describe_compute_jobs(table, records) -> None:
    table.counts = selectors.run_node_counts(record.run_id for record in records)


# --- Groves ---------------------------------------------------------------------------------------

@observability_page
def grove_list_view(request: HttpRequest) -> HttpResponse:
    return _table_page(request, queryset=selectors.grove_table_rows(), filterset_class=GroveFilterSet,
                       table_class=GroveTable, template="staff/groves.html", export_name="groves")


@observability_page
def grove_detail_view(request: HttpRequest, slug: str) -> HttpResponse:
    detail = selectors.grove_detail(request.user, slug=slug)
    if detail is None:
        raise Http404(f"No Grove '{slug}'.")
    recent = selectors.grove_recent_placements(request.user, grove=detail.grove)
    table = PlacementTable(recent, subjects=selectors.subjects_describe(recent), orderable=False)
    return render(request, "staff/grove_detail.html", {"detail": detail, "grove": detail.grove,
                                                       "placements_table": table})


# --- native ingress ----------------------------------------------------------------------------------

@observability_page
def ingress_route_list_view(request: HttpRequest) -> HttpResponse:
    """The edge's routes the acting user may see, with each one's state and nginx's last error."""
    return _table_page(request, queryset=routes_visible(request.user).order_by("hostname"),
                       filterset_class=IngressRouteFilterSet, table_class=IngressRouteTable,
                       template="staff/ingress.html", export_name="ingress-routes",
                       extra={"ingress": ingress_status()})


# --- accelerator inventory --------------------------------------------------------------------------

@observability_page
def inventory_view(request: HttpRequest) -> HttpResponse:
    groups = selectors.inventory_groups()
    teams = selectors.team_usage(request.user)
    rows = [(use, mark_safe(charts.bar_fraction_svg(use.budget_fraction))) for use in teams]
    return render(request, "staff/inventory.html", {"groups": [g for g in groups if not g.simulated],
                                                    "simulated": [g for g in groups if g.simulated],
                                                    "teams": rows})


# --- placements -------------------------------------------------------------------------------------

@observability_page
def placement_list_view(request: HttpRequest) -> HttpResponse:
    return _table_page(request, queryset=selectors.placement_rows(request.user),
                       filterset_class=ExecutionPlacementFilterSet, table_class=PlacementTable,
                       template="staff/placements.html", describe=_describe_placements, export_name="placements")


@observability_page
def placement_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    placement = selectors.placement_get(request.user, pk=pk)
    node = selectors.placement_node(placement)
    requirement = placement.requirement or {}
    platform = (requirement.get("compatibility") or {}).get("platform") or {}
    decision = placement_decision(placement)
    scores = decision.get("scores") or {}
    return render(request, "staff/placement_detail.html", {
        "verdict": placement_outcome(placement),
        "compute_job": selectors.compute_jobs_by_run([node.run_id]).get(node.run_id) if node else None,
        "placement": placement, "decision": decision, "node": node, "plugins": scoring.NAMES,
        # Every candidate's score per plugin and total ("why here"), beside its verdict ("why not").
        "candidate_rows": [(candidate, scoring.cells(candidate.get("score")))
                           for candidate in decision.get("candidates", [])],
        "why_here": [(label, entry["grove_slug"], scoring.cells(entry))
                     for label, entry in (("chosen", scores.get("chosen")), ("runner-up", scores.get("runner_up")))
                     if entry],
        "platform_allowed": platform.get("allowed", []), "platform_sources": platform.get("sources", []),
        "resources": requirement.get("resources") or {}, "accelerators": requirement.get("accelerators"),
    })


# --- runs ---------------------------------------------------------------------------------------------

@observability_page
def run_list_view(request: HttpRequest) -> HttpResponse:
    return _table_page(request, queryset=selectors.run_rows(request.user), filterset_class=RunFilterSet,
                       table_class=RunTable, template="staff/runs.html", describe=_describe_runs, export_name="runs")


@observability_page
def compute_job_list_view(request: HttpRequest) -> HttpResponse:
    return _table_page(request, queryset=selectors.compute_job_rows(request.user),
                       filterset_class=ComputeJobFilterSet, table_class=ComputeJobTable,
                       template="staff/compute_jobs.html", describe=_describe_compute_jobs,
                       export_name="compute-jobs")


@observability_page
def run_detail_view(request: HttpRequest, run_id) -> HttpResponse:
    run, nodes, placements = selectors.run_detail(request.user, run_id=run_id)
    rows = [(node, placements.get(str(node.pk)), job_signal(node.current_job if node.current_job_id else None))
            for node in nodes]
    compute = selectors.compute_jobs_by_run([run.id]).get(run.id)
    outputs = [{"node": node, "log_tail": selectors.output_tail(node.current_job if node.current_job_id else None)}
               for node in nodes]
    return render(request, "staff/run_detail.html", {"run": run, "rows": rows, "compute_job": compute,
                                                     "outputs": outputs,
                                                     "cancellable": _cancellable(request.user, run),
                                                     "lineage": run_lineage(run_id=run.id, user=request.user)})


def _cancellable(user, run) -> bool:
    # The button shows only where the action would be allowed; posting anyway is refused by the service.
    return run.status in ("pending", "running") and may(user, "pipelines.change_pipelinerun", team=run.team)


@observability_page
def artifact_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    """One artifact: what it is, who produced it, who consumed it, and the lineage around it (bounded)."""
    artifact = artifact_get(artifact_id=pk, user=request.user)  # another team's: the page shows the refusal
    lineage = artifact_lineage(artifact=artifact, user=request.user)
    return render(request, "staff/artifact_detail.html", {
        "artifact": artifact, "lineage": lineage, "graph": mark_safe(charts.lineage_svg(lineage))})


@observability_page
def compute_job_view(request: HttpRequest, job_id) -> HttpResponse:
    """One compute job: its steps (status, attempt, Grove, placement outcome, unclaimed signal, output tail),
    every attempt's Grove job, and links to its run, placements and Groves. Scoped to the acting user's teams."""
    page = selectors.compute_job_page(request.user, job_id=job_id)
    return render(request, "staff/compute_job.html", {"page": page, "job": page.job})


@observability_page
@require_http_methods(["GET", "POST"])
def run_cancel_view(request: HttpRequest, run_id) -> HttpResponse:
    """GET: a confirmation page (works without JavaScript); POST: cancel, then back to the run. The
    permission is asked first, as the API asks it, so a viewer hears ``permission_required`` whatever the run."""
    authorize(request.user, "pipelines.change_pipelinerun")
    run = selectors.run_detail(request.user, run_id=run_id)[0]
    if request.method == "GET":
        # The confirmation page only for who may cancel: the service's own check, refusing with its code.
        authorize(request.user, "pipelines.change_pipelinerun", team=run.team, what="this run")
        return render(request, "staff/run_cancel.html", {"run": run})
    reason = (request.POST.get("reason") or "").strip() or f"cancelled by {request.user.get_username()} (staff page)"
    # Refusals (permission, team) propagate to ``observability_page`` as 403 pages: nothing changed.
    cancelled = pipeline_run_cancel_as(actor=request.user, run_id=run.id, reason=reason[:64])
    # The API's audit event for the same action (the middleware writes it for /api/ calls only).
    audit_record(actor=request.user, via=AuditVia.PAGE, action="pipeline-run-cancel", target_type="pipeline-run",
                 target_id=run.id, team=run.team, detail={"method": "POST", "path": request.path,
                                                          "status": cancelled.status, "reason": reason[:64]})
    messages.success(request, f"Run {run.id} cancelled: its live Grove jobs were asked to stop.")
    return redirect("staff:run-detail", run_id=run.id)


# --- the "would have refused" report ------------------------------------------------------------------

def _window(request: HttpRequest) -> tuple[datetime, datetime, list[str]]:
    """[since, until) from ?since=YYYY-MM-DD&until=YYYY-MM-DD (until inclusive as a day); default 14 days."""
    errors = []
    today = timezone.now().date()
    until_day = today
    since_day = today - timedelta(days=13)
    for name in ("since", "until"):
        raw = request.GET.get(name)
        if not raw:
            continue
        parsed = parse_date(raw) if len(raw) == 10 else None
        if parsed is None:
            errors.append(f"'{raw}' is not a date for {name}: use YYYY-MM-DD.")
        elif name == "since":
            since_day = parsed
        else:
            until_day = parsed
    if since_day > until_day:
        errors.append("since is after until.")
    elif (until_day - since_day).days > REPORT_MAX_DAYS:
        errors.append(f"The window is at most {REPORT_MAX_DAYS} days.")
    tz = timezone.get_current_timezone()
    try:
        since = timezone.make_aware(datetime.combine(since_day, time.min), tz)
        until = timezone.make_aware(datetime.combine(until_day + timedelta(days=1), time.min), tz)
    except OverflowError:
        return timezone.now(), timezone.now(), [*errors, "The window is out of range."]
    return since, until, errors


@observability_page
def refusal_report_view(request: HttpRequest) -> HttpResponse:
    since, until, errors = _window(request)
    if errors:
        return render(request, "staff/refusals.html", {"errors": errors, "since": request.GET.get("since", ""),
                                                       "until": request.GET.get("until", "")}, status=400)
    report = selectors.refusal_report(request.user, since=since, until=until)
    listing = selectors.refused_placements(request.user).filter(created_at__gte=since, created_at__lt=until)
    if request.GET.get("_export") == "csv":
        return _csv(PlacementTable(list(listing[:EXPORT_MAX_ROWS])), "refusals", _describe_placements)
    page_error = _too_deep(request)
    table = PlacementTable(listing.none() if page_error else listing, orderable=False)
    _paginate(request, table)
    _describe_placements(table, [row.record for row in table.page.object_list])
    chart = mark_safe(charts.trend_svg(report.trend, title="Refused and would-refuse placements per day"))
    return render(request, "staff/refusals.html", {
        "report": report, "chart": chart, "table": table, "since": since.date().isoformat(),
        "until": (until - timedelta(days=1)).date().isoformat(),
        "compatibility_on": is_enabled("host.deploy.forest_compatibility"), "page_error": page_error,
    }, status=400 if page_error else 200)


# --- honest status ------------------------------------------------------------------------------------

@observability_page
def status_view(request: HttpRequest) -> HttpResponse:
    defaults = {name: flag.default for name, flag in FLAGS.items()}
    rows = [(c, capabilities.state_label(c, defaults).replace("`", ""), is_enabled(c.flag) if c.flag else None)
            for c in capabilities.CAPABILITIES]
    return render(request, "staff/status.html", {"rows": rows, "states": capabilities.STATES,
                                                 "processes": process_liveness(),
                                                 "within_s": settings.FOREST_LIVENESS_WITHIN_S})


# --- /metrics -----------------------------------------------------------------------------------------

def metrics_view(request: HttpRequest) -> HttpResponse:
    """django-prometheus's process metrics plus Forest's, for a staff session or the scrape token."""
    token = settings.FOREST_METRICS_TOKEN
    presented = request.headers.get("Authorization", "")
    scheme, _, secret = presented.partition(" ")
    by_token = bool(token) and scheme.lower() == "bearer" and hmac.compare_digest(secret.strip(), token)
    if not by_token and not is_staff_user(request.user):
        response = HttpResponse("Metrics need a staff session or 'Authorization: Bearer <FOREST_METRICS_TOKEN>'.\n",
                                status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="forest-metrics"'
        return response
    body = prometheus_client.generate_latest(prometheus_client.REGISTRY) + prometheus_client.generate_latest(
        forest_registry())
    return HttpResponse(body, content_type=prometheus_client.CONTENT_TYPE_LATEST)
