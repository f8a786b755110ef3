from django.contrib import admin

from apps.accounts.admin import TeamScopedAdmin
from apps.compute.models import ComputeJob


@admin.register(ComputeJob)
class ComputeJobAdmin(TeamScopedAdmin):
    list_display = ("name", "id", "environment", "run", "created_at")
    search_fields = ("name", "id")
    readonly_fields = [f.name for f in ComputeJob._meta.fields]
