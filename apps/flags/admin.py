"""Flags in Django admin: the registry with default and effective value side by side, audited toggles."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from apps.core.errors import ForestError
from apps.flags import services
from apps.flags.models import Flag, FlagAudit, FlagOverride
from apps.flags.selectors import resolve


def _toggle(modeladmin, request, queryset, enabled: bool | None) -> None:
    reason = f"Django admin action by {request.user.get_username()}"
    for flag in queryset:
        if enabled is None:
            services.flag_override_clear(name=flag.name, reason=reason, actor=request.user)
        else:
            services.flag_override_set(name=flag.name, enabled=enabled, reason=reason, actor=request.user)
    modeladmin.message_user(request, f"Updated {queryset.count()} flag(s); the change is audited.")


@admin.action(description="Turn on (global override)")
def turn_on(modeladmin, request, queryset):
    _toggle(modeladmin, request, queryset, True)


@admin.action(description="Turn off (global override)")
def turn_off(modeladmin, request, queryset):
    _toggle(modeladmin, request, queryset, False)


@admin.action(description="Reset to default (remove global override)")
def reset_default(modeladmin, request, queryset):
    _toggle(modeladmin, request, queryset, None)


class FlagOverrideInline(admin.TabularInline):
    model = FlagOverride
    extra = 0
    can_delete = False
    fields = ("scope", "scope_value", "enabled", "updated_at", "updated_by")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("name", "default_display", "effective_display", "source", "stage", "description")
    readonly_fields = ("name", "default", "stage", "description")
    actions = [turn_on, turn_off, reset_default]
    inlines = [FlagOverrideInline]
    search_fields = ("name", "description")

    @admin.display(description="default")
    def default_display(self, obj: Flag) -> str:
        return "on" if obj.default else "off"

    @admin.display(description="effective (global)")
    def effective_display(self, obj: Flag) -> str:
        return "on" if resolve(obj.name)[0] else "off"

    @admin.display(description="set by")
    def source(self, obj: Flag) -> str:
        return resolve(obj.name)[1]

    def has_add_permission(self, request):
        return False  # flags are declared in code

    def has_delete_permission(self, request, obj=None):
        return False


class FlagOverrideForm(forms.ModelForm):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), help_text="Why? Kept in the audit log.")

    class Meta:
        model = FlagOverride
        fields = ("flag", "scope", "scope_value", "enabled")


@admin.register(FlagOverride)
class FlagOverrideAdmin(admin.ModelAdmin):
    form = FlagOverrideForm
    list_display = ("flag", "scope", "scope_value", "enabled", "default_display", "updated_at", "updated_by")
    list_filter = ("scope", "enabled", "flag")

    @admin.display(description="default")
    def default_display(self, obj: FlagOverride) -> str:
        return "on" if obj.flag.default else "off"

    def get_readonly_fields(self, request, obj=None):
        return ("flag", "scope", "scope_value") if obj else ()

    def save_model(self, request, obj, form, change):
        try:
            saved = services.flag_override_set(
                name=obj.flag_id, enabled=obj.enabled, reason=form.cleaned_data["reason"],
                scope=obj.scope, scope_value=obj.scope_value, actor=request.user,
            )
        except ForestError as exc:
            messages.error(request, exc.detail)
            return
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.flag_override_clear(
            name=obj.flag_id, scope=obj.scope, scope_value=obj.scope_value, actor=request.user,
            reason=f"override deleted in Django admin by {request.user.get_username()}",
        )

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(FlagAudit)
class FlagAuditAdmin(admin.ModelAdmin):
    list_display = ("created_at", "flag", "scope", "scope_value", "old_value", "new_value", "actor_label", "reason")
    list_filter = ("flag", "scope")
    search_fields = ("reason", "actor_label")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
