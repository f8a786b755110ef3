"""django-tables2 tables for the staff pages: sortable columns, per-page, and CSV export (``as_values``).

A column's ``order_by`` names an indexed field; computed columns are not orderable. ``render_*`` is the
HTML cell, ``value_*`` the plain value that goes into CSV.

The HTML body is rendered by ``StaffTable.body_html`` in one pass instead of the library's per-cell template
loop: at 50 rows x 8 columns that loop (bound cells, signature inspection per cell, a template variable
lookup and escape per cell) cost more than every query of the page together. It keeps the library's cell
semantics (choice labels, empty values → the column default, ``render_*`` with the arguments it names, the
columns the request chose); cells are built with ``html.escape`` and f-strings, and links from URL patterns
reversed once per process (``url_for``), because ``format_html`` and ``reverse`` per cell were the next
largest costs.
"""
from __future__ import annotations

import contextlib
import html
import inspect
from functools import cache

import django_tables2 as tables
from django.core.exceptions import FieldDoesNotExist
from django.urls import get_script_prefix, reverse
from django.utils.formats import localize
from django.utils.safestring import SafeData, SafeString, mark_safe

from apps.compute.models import ComputeJob
from apps.core import formatting
from apps.groves.models import Grove
from apps.ingress.models import IngressRoute
from apps.pipelines.models import PipelineRun
from apps.placement.models import ExecutionPlacement
from apps.placement.selectors import placement_outcome

# A value for each URL converter the staff pages use: reversed once, then split around it.
_SENTINELS = {"int": "918273645", "slug": "sentinel-slug-918273645", "uuid": "91827364-5000-4000-8000-918273645000"}
_CELL_ARGUMENTS = ("value", "record", "column", "bound_column", "table")


def esc(value) -> str:
    """HTML-escaped text of a value (safe strings pass through), as the template's autoescape would."""
    if isinstance(value, SafeData):
        return value
    return html.escape(value if isinstance(value, str) else str(localize(value)))


@cache
def _url_parts(name: str, converter: str, prefix: str) -> tuple[str, str]:
    sentinel = _SENTINELS[converter]
    head, _, tail = reverse(name, args=[sentinel]).partition(sentinel)
    return head, tail


def url_for(name: str, converter: str, value) -> str:
    """``reverse(name, args=[value])`` for a one-argument URL, escaped for an attribute, without resolving the
    pattern again (the script prefix is part of the cache key)."""
    head, tail = _url_parts(name, converter, get_script_prefix())
    return html.escape(f"{head}{value}{tail}")


def _badge(text: str, kind: str = "") -> SafeString:
    return mark_safe(f'<span class="badge{" " if kind else ""}{kind}">{esc(text)}</span>')


def _link(href: str, text) -> str:
    return f'<a href="{href}">{esc(text)}</a>'


class StaffTable(tables.Table):
    """A django-tables2 table whose HTML body is rendered in one pass (see the module docstring)."""

    def body_html(self) -> SafeString:
        cells = [self._cell(bound) for bound in self.columns]
        rows = ["<tr>" + "".join(f"<td>{cell(row.record)}</td>" for cell in cells) + "</tr>"
                for row in self.paginated_rows]
        return mark_safe("".join(rows))

    def _cell(self, bound):
        """A function record → the cell's HTML for one column, with the per-column work done once."""
        column, accessor = bound.column, tables.A(bound.accessor)
        default = esc(bound.default)
        empty = column.empty_values
        render = bound.render
        plain = getattr(render, "__func__", None) is tables.Column.render
        wants = [] if plain else [arg for arg in _CELL_ARGUMENTS if arg in inspect.signature(render).parameters]
        fixed = {"column": column, "bound_column": bound, "table": self}
        # A model field named like the column: read the attribute (the library's accessor resolution, with
        # its fallbacks, costs more than the cell); its choice label only when ``render_*`` takes the value.
        field = None
        model = getattr(self._meta, "model", None)
        if model is not None and "." not in accessor and "__" not in accessor:
            with contextlib.suppress(FieldDoesNotExist):
                field = model._meta.get_field(accessor)
        concrete = getattr(field, "concrete", False)
        display = f"get_{accessor}_display" if concrete and field.choices and (plain or "value" in wants) else None
        computed = field is None and not empty and not plain and "value" not in wants

        def cell(record) -> str:
            if computed:  # rendered from the record alone: no value to read
                value = None
            elif display is not None:
                value = getattr(record, display)()
            elif concrete:
                value = getattr(record, accessor)
            else:
                try:
                    value = accessor.resolve(record)
                except Exception:  # a computed column: no attribute of that name (as the library does)
                    value = None
            if value in empty:
                return default
            if plain:
                content = value
            else:
                arguments = {"value": value, "record": record, **fixed}
                content = render(**{arg: arguments[arg] for arg in wants})
            if bound.link:
                content = bound.link(content, value=value, record=record, **fixed)
            return esc(content)

        return cell


class GroveTable(StaffTable):
    slug = tables.Column(verbose_name="Grove")
    substrate = tables.Column()
    roles = tables.Column(orderable=False)
    platforms = tables.Column(orderable=False)
    change_kinds = tables.Column(verbose_name="Change kinds", orderable=False)
    cpu = tables.Column(verbose_name="CPU free / alloc", empty_values=(), orderable=False)
    memory = tables.Column(verbose_name="Memory free / alloc", empty_values=(), orderable=False)
    accelerators = tables.Column(verbose_name="Accelerators", empty_values=(), orderable=False)
    mesh = tables.Column(verbose_name="Mesh", empty_values=(), orderable=False)
    last_heartbeat_at = tables.Column(verbose_name="Last report")

    class Meta:
        model = Grove
        fields = ("slug", "substrate", "roles", "platforms", "change_kinds")
        attrs = {"id": "groves-table"}
        empty_text = "No Grove matches these filters."

    def render_slug(self, value):
        return mark_safe(_link(url_for("staff:grove-detail", "slug", value), value))

    def value_slug(self, value):
        return value

    def render_roles(self, value):
        return ", ".join(value)

    render_platforms = render_change_kinds = render_roles

    def render_mesh(self, record):
        if not record.mesh_address:
            return "—"
        return f"{record.mesh_address}:{record.mesh_proxy_port}"

    value_mesh = render_mesh

    def _units(self, record):
        # Three cells read the prefetched units; building the related manager each time is not free.
        if not hasattr(record, "_table_units"):
            record._table_units = list(record.placement_units.all())
        return record._table_units

    def _items(self, record):
        if not hasattr(record, "_table_items"):
            record._table_items = list(record.accelerators.all())
        return record._table_items

    def render_cpu(self, record):
        units = self._units(record)
        free = sum(u.cpu_milli_free for u in units)
        total = sum(u.cpu_milli_allocatable for u in units)
        return f"{formatting.cores(free)} / {formatting.cores(total)} cores ({len(units)} units)"

    def value_cpu(self, record):
        return sum(u.cpu_milli_free for u in self._units(record))

    def render_memory(self, record):
        units = self._units(record)
        return (f"{formatting.bytes_h(sum(u.memory_bytes_free for u in units))} / "
                f"{formatting.bytes_h(sum(u.memory_bytes_allocatable for u in units))}")

    def value_memory(self, record):
        return sum(u.memory_bytes_free for u in self._units(record))

    def render_accelerators(self, record):
        summary = formatting.accelerator_summary(self._items(record), self._units(record))
        if not summary:
            return mark_safe('<span class="muted">none</span>')
        return mark_safe("<br>".join(_badge(line) for line in summary))

    def value_accelerators(self, record):
        return "; ".join(formatting.accelerator_summary(self._items(record), self._units(record)))

    def render_last_heartbeat_at(self, record):
        badge = _badge("stale", "bad") if record.stale else _badge("fresh", "good")
        if not record.stale and not record.ready:  # live, not ready: placement passes it over
            badge += _badge("not polling", "bad")
        if record.simulated:
            badge += _badge("simulated", "warn")
        return mark_safe(f"{badge} {esc(formatting.age(record.last_heartbeat_at))}")

    def value_last_heartbeat_at(self, record):
        return record.last_heartbeat_at.isoformat() if record.last_heartbeat_at else ""


class PlacementTable(StaffTable):
    """Placements; ``subjects`` (from ``selectors.subjects_describe``) names the job behind each row. Rows
    come from ``selectors.placement_rows``: ``incompatibilities`` is the decision's list, read alone."""

    subject = tables.Column(verbose_name="Subject", empty_values=(), orderable=False)
    status = tables.Column(verbose_name="Status", empty_values=(), orderable=False)
    grove_slug = tables.Column(verbose_name="Grove")
    selected_platform = tables.Column(verbose_name="Platform")
    chooser = tables.Column(orderable=False)
    verdict = tables.Column(verbose_name="Verdict", empty_values=(), order_by=("would_refuse",))
    team = tables.Column()
    created_at = tables.Column(verbose_name="When")

    class Meta:
        model = ExecutionPlacement
        fields = ()
        attrs = {"id": "placements-table"}
        empty_text = "No placement matches these filters."

    def __init__(self, *args, subjects=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.subjects = subjects if subjects is not None else {}

    def _subject(self, record) -> dict:
        return self.subjects.get(record.pk) or {"label": f"{record.subject_type}:{record.subject_id}", "status": ""}

    def render_subject(self, record):
        subject = self._subject(record)
        job = (f' · <a href="{url_for("staff:compute-job", "uuid", subject["compute_job_id"])}">job page</a>'
               if subject.get("compute_job_id") else "")
        return mark_safe(f'{_link(url_for("staff:placement-detail", "int", record.pk), subject["label"])}{job}'
                         f'<br><span class="muted">{esc(record.subject_type)}:{esc(record.subject_id)}</span>')

    def value_subject(self, record):
        return f"{record.subject_type}:{record.subject_id}"

    def render_status(self, record):
        subject = self._subject(record)
        if not subject.get("status"):
            return "—"
        if subject.get("run_id"):
            return mark_safe(_link(url_for("staff:run-detail", "uuid", subject["run_id"]), subject["status"]))
        return subject["status"]

    def value_status(self, record):
        return self._subject(record).get("status", "")

    def render_grove_slug(self, record):
        if record.grove_id is None:
            return mark_safe(f'{esc(record.grove_slug)} {_badge("gone", "bad")}')
        return mark_safe(_link(url_for("staff:grove-detail", "slug", record.grove_slug), record.grove_slug))

    def value_grove_slug(self, record):
        return record.grove_slug

    def render_chooser(self, record):
        enforced = _badge("enforced") if record.enforced else ""
        return mark_safe(f"{esc(record.chooser)} {enforced}")

    def value_chooser(self, record):
        return f"{record.chooser} enforced" if record.enforced else record.chooser

    def render_verdict(self, record):
        shown = placement_outcome(record)  # one rendering for every surface (apps/placement/outcome.py)
        return mark_safe(f"{_badge(shown.label, shown.badge)} " + " ".join(f"<code>{esc(code)}</code>"
                                                                          for code in shown.codes))

    def value_verdict(self, record):
        shown = placement_outcome(record)
        return " ".join([shown.key, *shown.codes])

    def render_created_at(self, value):
        return _time(value)

    def value_created_at(self, value):
        return value.isoformat()


def _time(value) -> SafeString:
    return mark_safe(f'<time datetime="{value.isoformat()}">{esc(formatting.age(value))}</time>')


class RunTable(StaffTable):
    id = tables.Column(verbose_name="Run")
    job = tables.Column(verbose_name="Job", empty_values=(), orderable=False)
    kind = tables.Column()
    status = tables.Column()
    nodes = tables.Column(verbose_name="Nodes (done / failed / all)", empty_values=(), orderable=False)
    environment = tables.Column()
    team = tables.Column(orderable=False)
    reason = tables.Column(orderable=False)
    created_at = tables.Column(verbose_name="Started")
    finished_at = tables.Column(verbose_name="Finished", orderable=False)

    class Meta:
        model = PipelineRun
        fields = ()
        attrs = {"id": "runs-table"}
        empty_text = "No run matches these filters."

    def __init__(self, *args, counts=None, jobs=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.counts = counts if counts is not None else {}
        self.jobs = jobs if jobs is not None else {}  # run id → (compute job id, name), per page

    def _counts(self, record) -> dict:
        return self.counts.get(record.pk) or {"total": 0, "done": 0, "failed": 0}

    def render_job(self, record):
        job = self.jobs.get(record.pk)
        if job is None:
            return mark_safe('<span class="muted">—</span>')
        return mark_safe(_link(url_for("staff:compute-job", "uuid", job[0]), job[1]))

    def value_job(self, record):
        job = self.jobs.get(record.pk)
        return job[1] if job else ""

    def render_id(self, value):
        return mark_safe(_link(url_for("staff:run-detail", "uuid", value), str(value)[:8]))

    def value_id(self, value):
        return str(value)

    def render_status(self, value):
        kind = {"succeeded": "good", "failed": "bad", "cancelled": "warn"}.get(value, "")
        return _badge(value, kind)

    def render_nodes(self, record):
        counts = self._counts(record)
        return f"{counts['done']} / {counts['failed']} / {counts['total']}"

    def value_nodes(self, record):
        counts = self._counts(record)
        return f"{counts['done']}/{counts['failed']}/{counts['total']}"

    def render_created_at(self, value):
        return _time(value)

    def render_finished_at(self, value):
        return formatting.age(value)

    def value_created_at(self, value):
        return value.isoformat()

    def value_finished_at(self, value):
        return value.isoformat() if value else ""


class ComputeJobTable(StaffTable):
    """Compute jobs (rows from ``selectors.compute_job_rows``, the API's selector); ``counts`` (per page,
    ``selectors.run_node_counts``) are their runs' step counts."""

    name = tables.Column(verbose_name="Job")
    status = tables.Column(accessor="run__status", verbose_name="Status", order_by=("run__status",))
    steps = tables.Column(verbose_name="Steps (done / failed / all)", empty_values=(), orderable=False)
    environment = tables.Column()
    team = tables.Column()
    grove_pin = tables.Column(verbose_name="Pinned Grove", orderable=False)
    reason = tables.Column(accessor="run__reason", verbose_name="Reason", orderable=False)
    created_at = tables.Column(verbose_name="Submitted")
    finished_at = tables.Column(accessor="run__finished_at", verbose_name="Finished", orderable=False)
    run = tables.Column(accessor="run_id", verbose_name="Run", orderable=False)

    class Meta:
        model = ComputeJob
        fields = ()
        attrs = {"id": "compute-jobs-table"}
        empty_text = "No compute job matches these filters."

    def __init__(self, *args, counts=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.counts = counts if counts is not None else {}

    def render_name(self, record):
        return mark_safe(_link(url_for("staff:compute-job", "uuid", record.pk), record.name))

    def value_name(self, record):
        return record.name

    def render_status(self, record):
        return RunTable.render_status(self, record.run.status)

    def value_status(self, record):
        return record.run.status

    def render_steps(self, record):
        counts = self.counts.get(record.run_id) or {"total": 0, "done": 0, "failed": 0}
        return f"{counts['done']} / {counts['failed']} / {counts['total']}"

    def value_steps(self, record):
        counts = self.counts.get(record.run_id) or {"total": 0, "done": 0, "failed": 0}
        return f"{counts['done']}/{counts['failed']}/{counts['total']}"

    def render_run(self, value):
        return mark_safe(_link(url_for("staff:run-detail", "uuid", value), str(value)[:8]))

    def value_run(self, value):
        return str(value)

    def render_created_at(self, value):
        return _time(value)

    def value_created_at(self, value):
        return value.isoformat()

    def render_finished_at(self, value):
        return formatting.age(value)

    def value_finished_at(self, value):
        return value.isoformat() if value else ""


class IngressRouteTable(StaffTable):
    hostname = tables.Column(verbose_name="Host name")
    path_prefix = tables.Column(verbose_name="Path")
    workload_slug = tables.Column(verbose_name="Workload")
    grove = tables.Column(verbose_name="Grove", accessor="grove__slug")
    upstream = tables.Column(verbose_name="Mesh upstream", empty_values=(), orderable=False)
    state = tables.Column()
    last_error = tables.Column(verbose_name="Last error", orderable=False)
    state_changed_at = tables.Column(verbose_name="Since")

    class Meta:
        model = IngressRoute
        fields = ("hostname", "path_prefix", "workload_slug", "grove", "upstream", "state", "last_error",
                  "state_changed_at")
        attrs = {"id": "ingress-routes-table"}
        empty_text = "No route: no live native workload with an ingress host name on a fresh Grove."

    def render_grove(self, value):
        return mark_safe(_link(url_for("staff:grove-detail", "slug", value), value)) if value else "—"

    def value_grove(self, value):
        return value or ""

    def render_upstream(self, record):
        return record.upstream

    value_upstream = render_upstream

    def render_state(self, record):
        badge = {"serving": "good", "failed": "bad"}.get(record.state, "warn")
        return mark_safe(f'<span class="badge {badge}">{esc(record.state)}</span>')

    def value_state(self, record):
        return record.state
