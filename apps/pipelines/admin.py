"""Pipelines in admin: read-mostly views of runs, nodes and the outbox (services make every change)."""
from django.contrib import admin

from apps.accounts.admin import AuditedAdmin, TeamScopedAdmin
from apps.pipelines.models import PipelineNode, PipelineNodeEvent, PipelineOutbox, PipelineRun


class NodeInline(admin.TabularInline):
    model = PipelineNode
    fk_name = "run"
    extra = 0
    can_delete = False
    fields = ("node_id", "kind", "status", "reason", "wait_mode", "awaiting_job_id", "grove", "seeded_from_run")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(PipelineRun)
class PipelineRunAdmin(TeamScopedAdmin):
    list_display = ("id", "kind", "status", "environment", "created_at", "finished_at")
    list_filter = ("kind", "status")
    search_fields = ("id", "environment", "build_id")
    readonly_fields = [f.name for f in PipelineRun._meta.fields]
    inlines = [NodeInline]


@admin.register(PipelineNodeEvent)
class PipelineNodeEventAdmin(AuditedAdmin):
    list_display = ("node", "from_status", "to_status", "reason", "at")
    readonly_fields = ("node", "from_status", "to_status", "reason", "at")


@admin.register(PipelineOutbox)
class PipelineOutboxAdmin(AuditedAdmin):
    list_display = ("kind", "node", "job", "created_at", "next_send_at", "sends", "done_at")
    list_filter = ("kind",)
    readonly_fields = [f.name for f in PipelineOutbox._meta.fields]
