"""Flags in Django admin: the registry with default and effective value side by side, the last change
(who, when, why), toggles that need a reason (list action or the flag's own page) and the audit inline.

A flag's row mirrors the code registry, so its page has no Save button: the only write is a toggle,
which goes through ``services.flag_override_set``/``flag_override_clear`` and is audited.
"""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.utils import quote, unquote
from django.db.models import OuterRef, Subquery
from django.shortcuts import get_object_or_404, redirect
from django.urls import path, reverse
from django.utils.html import format_html

from apps.accounts.choices import AuditVia
from apps.core.errors import ForestError
from apps.flags import services
from apps.flags.choices import FlagScope
from apps.flags.models import Flag, FlagAudit, FlagOverride
from apps.flags.selectors import resolve


class FlagActionForm(ActionForm):
    reason = forms.CharField(required=False, label="Reason",
                             widget=forms.TextInput(attrs={"placeholder": "why (required; kept in the audit log)",
                                                           "size": 40}))


def _toggle(modeladmin, request, queryset, enabled: bool | None) -> None:
    reason = (request.POST.get("reason") or "").strip()
    if not reason:
        modeladmin.message_user(request, "Nothing changed: say why in the Reason box (it is kept in the audit log).",
                                level=messages.ERROR)
        return
    for flag in queryset:
        if enabled is None:
            services.flag_override_clear(name=flag.name, reason=reason, actor=request.user, via=AuditVia.ADMIN)
        else:
            services.flag_override_set(name=flag.name, enabled=enabled, reason=reason, actor=request.user,
                                       via=AuditVia.ADMIN)
    modeladmin.message_user(request, f"Updated {queryset.count()} flag(s); the change is audited.")


@admin.action(description="Turn on (global override)", permissions=["change"])
def turn_on(modeladmin, request, queryset):
    _toggle(modeladmin, request, queryset, True)


@admin.action(description="Turn off (global override)", permissions=["change"])
def turn_off(modeladmin, request, queryset):
    _toggle(modeladmin, request, queryset, False)


@admin.action(description="Reset to default (remove global override)", permissions=["change"])
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


class FlagAuditInline(admin.TabularInline):
    model = FlagAudit
    extra = 0
    can_delete = False
    max_num = 0
    ordering = ("-created_at", "-id")
    fields = ("created_at", "scope", "scope_value", "old_value", "new_value", "actor_label", "reason")
    readonly_fields = fields
    verbose_name = "change"
    verbose_name_plural = "audit history"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class FlagToggleForm(forms.Form):
    value = forms.ChoiceField(choices=[("on", "on"), ("off", "off"), ("default", "back to the default")],
                              label="Set to")
    scope = forms.ChoiceField(choices=FlagScope.choices, initial=FlagScope.GLOBAL)
    scope_value = forms.CharField(required=False, label="Environment or team",
                                  help_text="Empty for a global override.")
    reason = forms.CharField(label="Reason", widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
                             help_text="Required; kept in the audit log.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():  # rendered inside admin's form, submitted with the toggle form
            field.widget.attrs["form"] = "flag-toggle-form"


def _latest_audit(field: str):
    return Subquery(FlagAudit.objects.filter(flag=OuterRef("pk")).order_by("-created_at", "-id").values(field)[:1])


@admin.register(Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("name", "default_display", "effective_display", "source", "scoped", "last_change", "stage",
                    "description")
    readonly_fields = ("name", "default", "effective", "stage", "description")
    fields = readonly_fields
    actions = [turn_on, turn_off, reset_default]
    action_form = FlagActionForm
    inlines = [FlagOverrideInline, FlagAuditInline]
    search_fields = ("name", "description")
    audited_by_service = True  # the toggle is its only write: ``services`` records it in Audit events
    change_form_template = "admin/flags/flag/change_form.html"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("overrides").annotate(
            last_at=_latest_audit("created_at"), last_by=_latest_audit("actor_label"),
            last_reason=_latest_audit("reason"), last_new=_latest_audit("new_value"),
            last_scope=_latest_audit("scope"))

    @admin.display(description="scoped overrides")
    def scoped(self, obj: Flag) -> str:
        return ", ".join(f"{o.scope}={o.scope_value}: {'on' if o.enabled else 'off'}"
                         for o in obj.overrides.all() if o.scope != FlagScope.GLOBAL) or "—"

    @admin.display(description="last change")
    def last_change(self, obj: Flag) -> str:
        if not getattr(obj, "last_at", None):
            return "never changed"
        new = {True: "on", False: "off", None: "default"}[obj.last_new]
        return format_html("{} {} by {} on {}: “{}”", obj.last_scope, new, obj.last_by,
                           obj.last_at.strftime("%Y-%m-%d %H:%M"), obj.last_reason)

    @admin.display(description="effective (global)")
    def effective(self, obj: Flag) -> str:
        value, source = resolve(obj.name)
        return f"{'on' if value else 'off'} (set by {source})"

    def get_urls(self):
        toggle = path("<path:object_id>/toggle/", self.admin_site.admin_view(self.toggle_view),
                      name="flags_flag_toggle")
        return [toggle, *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Read-only mirror of the registry: no Save buttons; the toggle form below is the only write.
        extra = {"show_save": False, "show_save_and_continue": False, "show_save_and_add_another": False,
                 "show_delete": False, "toggle_form": FlagToggleForm(),
                 # object_id arrives quoted as admin writes it in URLs (``_`` → ``_5F``); kept quoted here.
                 "toggle_url": reverse("admin:flags_flag_toggle", args=[object_id]),
                 "can_toggle": self.has_change_permission(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def toggle_view(self, request, object_id):
        # The URL carries admin's quoted primary key (``_5F`` for ``_``), as every admin URL does.
        flag = get_object_or_404(Flag, pk=unquote(object_id))
        change_url = reverse("admin:flags_flag_change", args=[quote(flag.pk)])
        if request.method != "POST" or not self.has_change_permission(request, flag):
            return redirect(change_url)
        form = FlagToggleForm(request.POST)
        if not form.is_valid():
            first = next(iter(form.errors.items()))
            messages.error(request, f"Nothing changed: {first[0]}: {' '.join(first[1])}")
            return redirect(change_url)
        data = form.cleaned_data
        try:
            if data["value"] == "default":
                services.flag_override_clear(name=flag.name, reason=data["reason"], scope=data["scope"],
                                             scope_value=data["scope_value"], actor=request.user,
                                             via=AuditVia.ADMIN)
            else:
                services.flag_override_set(name=flag.name, enabled=data["value"] == "on", reason=data["reason"],
                                           scope=data["scope"], scope_value=data["scope_value"], actor=request.user,
                                           via=AuditVia.ADMIN)
        except ForestError as exc:
            messages.error(request, f"Nothing changed: {exc.detail}")
        else:
            messages.success(request, f"{flag.name} is now {data['value']} ({data['scope']}); the change is audited.")
        return redirect(change_url)

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
    audited_by_service = True  # saves and deletes go through ``services``, which records them in Audit events
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
                scope=obj.scope, scope_value=obj.scope_value, actor=request.user, via=AuditVia.ADMIN,
            )
        except ForestError as exc:
            messages.error(request, exc.detail)
            return
        obj.pk = saved.pk

    def delete_model(self, request, obj):
        services.flag_override_clear(
            name=obj.flag_id, scope=obj.scope, scope_value=obj.scope_value, actor=request.user, via=AuditVia.ADMIN,
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
