"""django-tables2 tables for the staff pages: sortable columns, per-page, and CSV export (``as_values``).

A column's ``order_by`` names an indexed field; computed columns are not orderable. ``render_*`` is the
HTML cell, ``value_*`` the plain value that goes into CSV.
"""
from __future__ import annotations

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from apps.core import formatting
from apps.groves.models import Grove
from apps.pipelines.models import PipelineRun
from apps.placement.models import ExecutionPlacement


def _badge(text: str, kind: str = "") -> str:
    return format_html('<span class="badge {}">{}</span>', kind, text)


def _codes(decision: dict) -> list[str]:
    return [item.get("code", "") for item in (decision or {}).get("incompatibilities", [])]


class GroveTable(tables.Table):
    slug = tables.Column(verbose_name="Grove", linkify=("staff:grove-detail", {"slug": tables.A("slug")}))
    substrate = tables.Column()
    roles = tables.Column(orderable=False)
    platforms = tables.Column(orderable=False)
    change_kinds = tables.Column(verbose_name="Change kinds", orderable=False)
    cpu = tables.Column(verbose_name="CPU free / alloc", empty_values=(), orderable=False)
    memory = tables.Column(verbose_name="Memory free / alloc", empty_values=(), orderable=False)
    accelerators = tables.Column(verbose_name="Accelerators", empty_values=(), orderable=False)
    last_heartbeat_at = tables.Column(verbose_name="Last report")

    class Meta:
        model = Grove
        fields = ("slug", "substrate", "roles", "platforms", "change_kinds")
        attrs = {"id": "groves-table"}
        empty_text = "No Grove matches these filters."

    def render_roles(self, value):
        return ", ".join(value)

    render_platforms = render_change_kinds = render_roles

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
        return format_html_join(mark_safe("<br>"), '<span class="badge">{}</span>', ((line,) for line in summary))

    def value_accelerators(self, record):
        return "; ".join(formatting.accelerator_summary(self._items(record), self._units(record)))

    def render_last_heartbeat_at(self, record):
        badge = _badge("stale", "bad") if record.stale else _badge("fresh", "good")
        return format_html("{} {}", badge, formatting.age(record.last_heartbeat_at))

    def value_last_heartbeat_at(self, record):
        return record.last_heartbeat_at.isoformat() if record.last_heartbeat_at else ""


class PlacementTable(tables.Table):
    """Placements; ``subjects`` (from ``selectors.subjects_describe``) names the job behind each row."""

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
        return format_html('<a href="{}">{}</a><br><span class="muted">{}:{}</span>',
                           reverse("staff:placement-detail", args=[record.pk]), self._subject(record)["label"],
                           record.subject_type, record.subject_id)

    def value_subject(self, record):
        return f"{record.subject_type}:{record.subject_id}"

    def render_status(self, record):
        subject = self._subject(record)
        if not subject.get("status"):
            return "—"
        if subject.get("run_id"):
            return format_html('<a href="{}">{}</a>', reverse("staff:run-detail", args=[subject["run_id"]]),
                               subject["status"])
        return subject["status"]

    def value_status(self, record):
        return self._subject(record).get("status", "")

    def render_grove_slug(self, record):
        if record.grove_id is None:
            return format_html("{} {}", record.grove_slug, _badge("gone", "bad"))
        return format_html('<a href="{}">{}</a>', reverse("staff:grove-detail", args=[record.grove_slug]),
                           record.grove_slug)

    def render_chooser(self, record):
        enforced = _badge("enforced") if record.enforced else ""
        return format_html("{} {}", record.chooser, enforced)

    def render_verdict(self, record):
        codes = _codes(record.decision)
        if record.would_refuse:
            label = _badge("would refuse", "warn")
        elif codes:
            label = _badge("refused", "bad")
        else:
            return _badge("compatible", "good")
        return format_html("{} {}", label, format_html_join(" ", "<code>{}</code>", ((c,) for c in codes)))

    def value_verdict(self, record):
        codes = _codes(record.decision)
        return ("would_refuse " if record.would_refuse else "refused " if codes else "compatible") + " ".join(codes)

    def render_created_at(self, value):
        return format_html('<time datetime="{}">{}</time>', value.isoformat(), formatting.age(value))

    def value_created_at(self, value):
        return value.isoformat()


class RunTable(tables.Table):
    id = tables.Column(verbose_name="Run", linkify=("staff:run-detail", {"run_id": tables.A("id")}))
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

    def __init__(self, *args, counts=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.counts = counts if counts is not None else {}

    def _counts(self, record) -> dict:
        return self.counts.get(record.pk) or {"total": 0, "done": 0, "failed": 0}

    def render_id(self, value):
        return str(value)[:8]

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
        return format_html('<time datetime="{}">{}</time>', value.isoformat(), formatting.age(value))

    def render_finished_at(self, value):
        return formatting.age(value)

    def value_created_at(self, value):
        return value.isoformat()

    def value_finished_at(self, value):
        return value.isoformat() if value else ""
