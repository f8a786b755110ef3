from django.contrib import admin

from apps.accounts.admin import TeamScopedAdmin
from apps.workloads.models import NativeWorkload, WorkloadGeneration, WorkloadSecret


class GenerationInline(admin.TabularInline):
    model = WorkloadGeneration
    extra = 0
    can_delete = False
    fields = ("number", "grove", "state", "live", "restarts", "probes", "reason", "observed_at")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(NativeWorkload)
class NativeWorkloadAdmin(TeamScopedAdmin):
    list_display = ("slug", "environment", "team", "grove", "updated_at")
    search_fields = ("slug",)
    readonly_fields = [f.name for f in NativeWorkload._meta.fields]
    inlines = [GenerationInline]

    def has_add_permission(self, request):
        return False  # written through the API so the generation writer runs


@admin.register(WorkloadGeneration)
class WorkloadGenerationAdmin(TeamScopedAdmin):
    team_field = "workload__team"
    list_display = ("workload", "number", "grove", "state", "live", "restarts", "reason", "observed_at")
    list_filter = ("state", "grove")
    readonly_fields = [f.name for f in WorkloadGeneration._meta.fields]

    def has_add_permission(self, request):
        return False


@admin.register(WorkloadSecret)
class WorkloadSecretAdmin(TeamScopedAdmin):
    """A team's secrets (names, never values): a member of another team neither lists nor opens them."""

    list_display = ("team", "environment", "name", "updated_at")
    list_filter = ("environment",)
    search_fields = ("name",)
    exclude = ("ciphertext",)
    readonly_fields = ("team", "environment", "name", "updated_at")

    def has_add_permission(self, request):
        return False  # set through the API, which encrypts
