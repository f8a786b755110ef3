"""Grove jobs in admin: read-only (services make every change)."""
from django.contrib import admin

from apps.accounts.admin import AuditedAdmin
from apps.dispatch.models import GroveJob


@admin.register(GroveJob)
class GroveJobAdmin(AuditedAdmin):
    list_display = ("idempotency_key", "grove", "status", "reason", "exit_code", "created_at")
    list_filter = ("status", "change_kind")
    search_fields = ("idempotency_key",)
    readonly_fields = [f.name for f in GroveJob._meta.fields]
