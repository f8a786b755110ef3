"""Groves in admin: reported fields are read-only (the Grove is their source); tokens shown once."""
from django import forms
from django.contrib import admin, messages

from apps.accounts.admin import AuditedAdmin
from apps.accounts.choices import AuditVia
from apps.accounts.services import audit_record
from apps.core import formatting
from apps.groves import services
from apps.groves.choices import Role, Substrate
from apps.groves.models import (
    AcceleratorInventoryItem,
    CapacityReport,
    EnrollmentToken,
    Grove,
    GroveCredential,
    PlacementUnit,
)


class PlacementUnitInline(admin.TabularInline):
    model = PlacementUnit
    extra = 0
    can_delete = False
    fields = ("unit_id", "cpu", "memory", "accelerator_slots")
    readonly_fields = fields

    @admin.display(description="CPU free / allocatable (cores)")
    def cpu(self, obj: PlacementUnit) -> str:
        return f"{formatting.cores(obj.cpu_milli_free)} / {formatting.cores(obj.cpu_milli_allocatable)}"

    @admin.display(description="memory free / allocatable")
    def memory(self, obj: PlacementUnit) -> str:
        return f"{formatting.bytes_h(obj.memory_bytes_free)} / {formatting.bytes_h(obj.memory_bytes_allocatable)}"

    @admin.display(description="accelerator slots free / allocatable")
    def accelerator_slots(self, obj: PlacementUnit) -> str:
        return "; ".join(f"{slot.get('inventory_id')}: {slot.get('free')} / {slot.get('allocatable')}"
                         for slot in obj.accelerators or []) or "—"

    def has_add_permission(self, request, obj=None):
        return False


class AcceleratorInline(admin.TabularInline):
    model = AcceleratorInventoryItem
    extra = 0
    can_delete = False
    # "model" would resolve to InlineModelAdmin.model (the class), so the device model has its own display.
    fields = ("inventory_id", "kind", "vendor", "device_model", "apis", "memory", "memory_kind",
              "memory_enforced", "share_mode")
    readonly_fields = fields

    @admin.display(description="model")
    def device_model(self, obj: AcceleratorInventoryItem) -> str:
        return obj.model

    @admin.display(description="memory")
    def memory(self, obj: AcceleratorInventoryItem) -> str:
        return formatting.bytes_h(obj.memory_bytes)

    def has_add_permission(self, request, obj=None):
        return False


class CredentialInline(admin.TabularInline):
    """A Grove's credentials on its page: only for a role that may view credentials (staff admin), never for
    a viewer, who may read the Grove but not what authenticates it (docs/permissions.md)."""

    model = GroveCredential
    extra = 0
    can_delete = False
    fields = ("key_id", "created_at", "revoked_at", "revoked_reason")
    readonly_fields = fields

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm("groves.view_grovecredential")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Grove)
class GroveAdmin(AuditedAdmin):
    """Staff edit a Grove's name, roles, enabled switch and placement preference; each save is audited."""

    list_display = ("slug", "name", "substrate", "roles", "platforms", "enabled", "placement_preference",
                    "last_heartbeat_at", "stale_display", "ready_display", "simulated", "version")
    list_filter = ("substrate", "enabled", "simulated")
    search_fields = ("slug", "name")

    @admin.display(description="ready", boolean=True)
    def ready_display(self, obj: Grove) -> bool:
        """Polls for work (readiness apart from liveness: docs/decisions.md "Grove readiness")."""
        return obj.ready

    readonly_fields = ("id", "substrate", "platforms", "isolation_modes", "change_kinds", "version",
                       "last_heartbeat_at", "stale_since", "capacity_reported_at", "log_tail", "created_at")
    fields = ("id", "slug", "name", "enabled", "roles", "placement_preference", *readonly_fields[1:])
    inlines = [PlacementUnitInline, AcceleratorInline, CredentialInline]

    @admin.display(boolean=True, description="stale")
    def stale_display(self, obj: Grove) -> bool:
        return obj.stale

    def has_add_permission(self, request):
        return False  # Groves come from enrollment


@admin.register(EnrollmentToken)
class EnrollmentTokenAdmin(AuditedAdmin):
    list_display = ("key_id", "substrate", "roles", "note", "created_at", "expires_at", "used_at", "grove")
    list_filter = ("substrate",)
    fields = ("roles_text", "substrate", "note", "expires_in_s")

    def get_fields(self, request, obj=None):
        if obj:
            return ("key_id", "roles", "substrate", "note", "created_at", "expires_at", "used_at", "grove")
        return super().get_fields(request, obj)

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj) if obj else ()

    def get_form(self, request, obj=None, **kwargs):
        if obj:
            return super().get_form(request, obj, **kwargs)
        class NewTokenForm(forms.ModelForm):
            roles_text = forms.MultipleChoiceField(choices=Role.choices, label="Roles",
                                                   widget=forms.CheckboxSelectMultiple)
            substrate = forms.ChoiceField(choices=Substrate.choices)
            note = forms.CharField(required=False)
            expires_in_s = forms.IntegerField(initial=24 * 3600, label="Expires in (seconds)")

            class Meta:
                model = EnrollmentToken
                fields = ()

        return NewTokenForm

    def save_model(self, request, obj, form, change):
        token, presented = services.enrollment_token_create(
            roles=form.cleaned_data["roles_text"], substrate=form.cleaned_data["substrate"],
            expires_in_s=form.cleaned_data["expires_in_s"], note=form.cleaned_data["note"],
            created_by=request.user,
        )
        obj.pk = token.pk
        self._audit(request, token, "add", ["roles", "substrate", "note", "expires_in_s"])  # never the secret
        messages.warning(request, f"Enrollment token (shown once, copy it now): {presented}")

    def has_change_permission(self, request, obj=None):
        # Never changed after creation. (Answering True for obj=None, as this once did, let every staff
        # user — a viewer too — list the tokens: admin's view rule is "view or change".)
        return False


@admin.action(description="Revoke selected credentials", permissions=["change"])
def revoke(modeladmin, request, queryset):
    for credential in queryset.filter(revoked_at__isnull=True):
        services.grove_credential_revoke(credential=credential,
                                         reason=f"revoked in admin by {request.user.get_username()}")
        # The key id names the credential; its secret is never stored, so never recorded.
        audit_record(actor=request.user, via=AuditVia.ADMIN, action="grovecredential.revoke",
                     target_type="groves.grovecredential", target_id=credential.key_id,
                     detail={"grove": credential.grove.slug})
    modeladmin.message_user(request, "Revoked; the Grove must enroll again.")


@admin.register(GroveCredential)
class GroveCredentialAdmin(AuditedAdmin):
    list_display = ("key_id", "grove", "created_at", "revoked_at", "revoked_reason")
    list_filter = ("grove",)
    readonly_fields = ("key_id", "grove", "created_at", "revoked_at", "revoked_reason")
    exclude = ("secret_hash",)
    actions = [revoke]

    def has_add_permission(self, request):
        return False


@admin.register(CapacityReport)
class CapacityReportAdmin(AuditedAdmin):
    list_display = ("grove", "received_at", "version", "digest")
    list_filter = ("grove",)
    readonly_fields = ("grove", "received_at", "version", "digest", "capacity")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


admin.site.site_header = "Forest administration"
admin.site.site_title = "Forest"
