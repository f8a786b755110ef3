"""Accelerator entitlements (editable, every change audited) and the claim/usage ledger (read-only)."""
from django.contrib import admin

from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.accounts.admin import AuditedAdmin


@admin.register(AcceleratorEntitlement)
class AcceleratorEntitlementAdmin(AuditedAdmin):
    list_display = ("team", "api", "vendor", "max_concurrent", "budget_accelerator_seconds", "period", "updated_at")
    list_filter = ("period", "api", "vendor")
    search_fields = ("team", "note")


class UsageInline(admin.TabularInline):
    model = AcceleratorUsage
    extra = 0
    can_delete = False
    fields = ("day", "accelerator_ms")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AcceleratorClaim)
class AcceleratorClaimAdmin(ReadOnlyAdmin):
    list_display = ("job_ref", "team", "grove_slug", "unit_id", "api", "count", "cooperative", "state",
                    "started_at", "ended_at", "end_reason")
    list_filter = ("state", "api", "cooperative", "end_reason")
    search_fields = ("job_ref", "team", "grove_slug")
    inlines = [UsageInline]


@admin.register(AcceleratorUsage)
class AcceleratorUsageAdmin(ReadOnlyAdmin):
    list_display = ("day", "team", "api", "vendor", "accelerator_seconds", "claim")
    list_filter = ("day", "api")
    search_fields = ("team", "claim__job_ref")

    @admin.display(description="accelerator-seconds")
    def accelerator_seconds(self, obj: AcceleratorUsage) -> str:
        return f"{obj.accelerator_ms / 1000:.1f}"
