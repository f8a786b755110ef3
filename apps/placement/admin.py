"""Stored placements in admin: read-only decisions (of the user's teams), and a staff action to re-place
that asks what the API's re-place asks (the permission and each placement's team) and writes the same
audit event."""
from django.contrib import admin, messages

from apps.accounts.admin import TeamScopedAdmin
from apps.accounts.choices import AuditVia
from apps.accounts.selectors import authorize
from apps.accounts.services import audit_record
from apps.core.errors import ForestError
from apps.placement import batch
from apps.placement.models import ExecutionPlacement
from apps.placement.vocabulary import MAX_BATCH_SIZE


@admin.register(ExecutionPlacement)
class ExecutionPlacementAdmin(TeamScopedAdmin):
    list_display = ("subject_type", "subject_id", "grove_slug", "selected_platform", "chooser", "enforced",
                    "would_refuse", "created_at")
    list_filter = ("subject_type", "chooser", "enforced", "would_refuse")
    search_fields = ("subject_id", "grove_slug")
    readonly_fields = [f.name for f in ExecutionPlacement._meta.fields]
    actions = ["replace"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Re-place (choose afresh) the selected placements", permissions=["change"])
    def replace(self, request, queryset):
        # One batch: decided together, so the selection never overcommits the Groves it moves to.
        placements = list(queryset[:MAX_BATCH_SIZE])
        try:
            for placement in placements:  # all or nothing: one refused placement refuses the batch
                authorize(request.user, "placement.change_executionplacement", team=placement.team,
                          what="this placement")
            outcomes = batch.replace_batch(placements=placements, actor=request.user, reason="re-placed from admin")
        except ForestError as exc:
            self.message_user(request, f"{exc.code}: {exc.detail}", messages.ERROR)
            return
        for placement, outcome in zip(placements, outcomes, strict=True):
            if outcome.error is not None:
                self.message_user(request, f"{placement}: {outcome.error.code}: {outcome.error.detail}",
                                  messages.ERROR)
            else:
                audit_record(actor=request.user, via=AuditVia.ADMIN, action="placement-replace",
                             target_type="placement", target_id=placement.pk, team=placement.team,
                             detail={"grove": outcome.grove_slug or "", "reason": "re-placed from admin"})
                self.message_user(request, f"{placement.subject_id} -> {outcome.grove_slug}", messages.SUCCESS)
