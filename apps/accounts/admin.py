"""Admin pages: grant roles (a user's groups) and team membership, manage API tokens (the key is shown
once, on creation), and read the audit trail. Every change made here is audited too."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied, ValidationError

from apps.accounts import services
from apps.accounts.choices import AuditVia
from apps.accounts.models import ApiToken, AuditEvent, Team
from apps.accounts.selectors import team_authorize, visible
from apps.core.errors import Forbidden


class AuditedAdmin(admin.ModelAdmin):
    """Records each save and delete made in the admin as an ``AuditEvent`` (with the request id). Every admin
    page that lets anyone add, change or delete is one (or says ``audited_by_service``: its every write goes
    through a service that audits); tests/accounts/test_audit_everywhere.py walks the admin site to hold it."""

    def _audit(self, request, obj, action: str, changed: list[str] | None = None) -> None:
        meta = obj._meta
        services.audit_record(actor=request.user, via=AuditVia.ADMIN, action=f"{meta.model_name}.{action}",
                              target_type=meta.label_lower, target_id=obj.pk, team=str(getattr(obj, "team", "")),
                              detail={"object": str(obj)[:200], "changed": changed or []})

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        self._audit(request, obj, "change" if change else "add", list(form.changed_data))

    def delete_model(self, request, obj):
        self._audit(request, obj, "delete")
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self._audit(request, obj, "delete")
        super().delete_queryset(request, queryset)


class TeamScopedAdmin(AuditedAdmin):
    """An admin of team-owned work: the change list, search and every object page hold only what the
    user may see (``visible``, the API's rule); opening another team's object by its URL is 403
    ``team_forbidden``, as the API and the staff pages answer it. ``team_field`` is the lookup of the
    owning team (``"team"``, or ``"workload__team"`` for a row owned through its parent)."""

    team_field = "team"

    def get_queryset(self, request):
        return visible(super().get_queryset(request), request.user, team_field=self.team_field)

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            return obj
        field = self.model._meta.pk if from_field is None else self.model._meta.get_field(from_field)
        try:
            team = (self.model._default_manager.filter(**{field.name: field.to_python(object_id)})
                    .values_list(self.team_field, flat=True).first())
        except (ValidationError, ValueError):
            return None
        if team is not None:
            try:
                team_authorize(request.user, team, what=f"this {self.model._meta.verbose_name}")
            except Forbidden as refused:
                raise PermissionDenied(f"{refused.detail} [{refused.code}]") from None
        return None


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ("slug", "name", "member_count", "created_at")
    search_fields = ("slug", "name", "members__username")
    filter_horizontal = ("members",)

    @admin.display(description="members")
    def member_count(self, obj: Team) -> int:
        return obj.members.count()

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if "members" in form.changed_data:
            self._audit(request, form.instance, "members", [u.get_username() for u in form.instance.members.all()])


class ApiTokenCreateForm(forms.ModelForm):
    expires_in_days = forms.IntegerField(min_value=1, max_value=services.MAX_TOKEN_TTL_DAYS, initial=90)

    class Meta:
        model = ApiToken
        fields = ["user", "name"]


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedAdmin):
    list_display = ("name", "user", "key_id", "created_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "key_id", "user__username")
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenCreateForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("user", "name", "key_id", "created_at", "expires_at", "revoked_at",
                "revoked_reason", "created_by")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("user", "name", "expires_in_days")
        return self.get_readonly_fields(request, obj)

    def save_model(self, request, obj, form, change):
        if change:
            return
        token, presented = services.api_token_create(
            user=form.cleaned_data["user"], name=form.cleaned_data["name"],
            expires_in_days=form.cleaned_data["expires_in_days"], created_by=request.user, via=AuditVia.ADMIN)
        obj.pk = token.pk
        self.message_user(request, f"Token for {token.user.get_username()} ({token.name}): {presented} — "
                          "copy it now; Host keeps only its hash and cannot show it again.", messages.WARNING)

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row keeps the audit trail's token reference meaningful

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        for token in queryset:
            services.api_token_revoke(token=token, reason=f"revoked in admin by {request.user.get_username()}",
                                      actor=request.user, via=AuditVia.ADMIN)
        self.message_user(request, f"Revoked {queryset.count()} token(s).")


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("at", "actor_label", "via", "action", "target_type", "target_id", "team", "request_id")
    list_filter = ("via", "action", "team")
    search_fields = ("actor_label", "action", "target_id", "request_id", "team")
    date_hierarchy = "at"
    readonly_fields = ("at", "actor", "actor_label", "token", "via", "action", "target_type", "target_id", "team",
                       "request_id", "detail")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


User = get_user_model()


class RoleGrantingUserAdmin(AuditedAdmin, UserAdmin):
    """Django's user admin; a user's *groups* are their roles. Changes to groups and flags are audited."""

    list_display = (*UserAdmin.list_display, "roles")
    list_filter = (*UserAdmin.list_filter, "forest_teams")

    def get_readonly_fields(self, request, obj=None):
        # Only a superuser makes superusers or hands out permissions outside the roles.
        fields = super().get_readonly_fields(request, obj)
        if request.user.is_superuser:
            return fields
        return (*fields, "is_superuser", "user_permissions")

    def user_change_password(self, request, id, form_url=""):
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:  # set (Django's form validated it)
            services.audit_record(actor=request.user, via=AuditVia.ADMIN, action="user.password_set",
                                  target_type="auth.user", target_id=id)
        return response

    @admin.display(description="roles")
    def roles(self, obj) -> str:
        return ", ".join(group.name for group in obj.groups.all())

    def save_related(self, request, form, formsets, change):
        before = set(form.instance.groups.values_list("name", flat=True)) if change else set()
        super().save_related(request, form, formsets, change)
        after = set(form.instance.groups.values_list("name", flat=True))
        if before != after or {"is_staff", "is_superuser", "user_permissions"} & set(form.changed_data):
            services.audit_record(actor=request.user, via=AuditVia.ADMIN, action="user.roles",
                                  target_type="auth.user", target_id=form.instance.pk,
                                  detail={"user": form.instance.get_username(), "granted": sorted(after - before),
                                          "revoked": sorted(before - after), "changed": list(form.changed_data)})


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, RoleGrantingUserAdmin)


class AuditedGroupAdmin(AuditedAdmin, GroupAdmin):
    """Django's group admin: a group is a role, so its permissions are a staff write like any other."""


if admin.site.is_registered(Group):
    admin.site.unregister(Group)
admin.site.register(Group, AuditedGroupAdmin)
