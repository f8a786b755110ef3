"""Writes for accounts: API tokens, role grants, team membership, audit events, role sync."""
from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts import roles
from apps.accounts.choices import AuditVia
from apps.accounts.models import ApiToken, AuditEvent, Team
from apps.core import bearer, context
from apps.core.errors import Conflict, NotAuthenticated, NotFound, ValidationFailed

TOKEN_PREFIX = "fat"
_TEAM_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
MAX_TOKEN_TTL_DAYS = 366


def _user(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise NotFound("user_not_found", f"No user '{username}'.", field="user")
    return user


def audit_record(*, actor, via: str, action: str, target_type: str = "", target_id: Any = "", team: str = "",
                 detail: dict | None = None, token: ApiToken | None = None, actor_label: str = "",
                 request_id: str | None = None) -> AuditEvent:
    """Append one audit event; the request id defaults to the current request's."""
    real = actor if getattr(actor, "pk", None) else None
    label = actor_label or (real.get_username() if real is not None else "unknown")
    return AuditEvent.objects.create(
        actor=real, actor_label=label[:150], token=token, via=via, action=action[:80],
        target_type=target_type[:80], target_id=str(target_id)[:200], team=(team or "")[:100],
        request_id=(context.request_id.get() if request_id is None else request_id)[:128], detail=detail or {},
    )


def api_token_create(*, user, name: str, expires_in_days: int | None = None, created_by=None,
                     via: str = AuditVia.COMMAND, actor_label: str = "") -> tuple[ApiToken, str]:
    """A new token for ``user``; the returned string is the only time its secret exists in clear."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValidationFailed("invalid_token_name", "Name the token after its client (1..100 characters).",
                               field="name")
    days = settings.API_TOKEN_DEFAULT_TTL_DAYS if expires_in_days is None else expires_in_days
    if not 1 <= days <= MAX_TOKEN_TTL_DAYS:
        raise ValidationFailed("out_of_range", f"Expiry must be 1..{MAX_TOKEN_TTL_DAYS} days.", field="expires_in")
    if not user.is_active:
        raise ValidationFailed("user_inactive", f"User '{user.get_username()}' is inactive.", field="user")
    with transaction.atomic():
        if ApiToken.objects.filter(user=user, name=name, revoked_at__isnull=True).exists():
            raise Conflict("token_name_taken",
                           f"User '{user.get_username()}' already has a live token named '{name}'; "
                           "revoke it first or pick another name.", field="name")
        presented, key_id, secret_hash = bearer.new_secret(TOKEN_PREFIX)
        token = ApiToken.objects.create(user=user, name=name, key_id=key_id, secret_hash=secret_hash,
                                        expires_at=timezone.now() + timedelta(days=days),
                                        created_by=created_by if getattr(created_by, "pk", None) else None)
        audit_record(actor=created_by, via=via, action="api_token.create", target_type="accounts.apitoken",
                     target_id=token.key_id, actor_label=actor_label,
                     detail={"user": user.get_username(), "name": name, "expires_at": token.expires_at.isoformat()})
    return token, presented


def api_token_revoke(*, token: ApiToken, reason: str, actor=None, via: str = AuditVia.COMMAND,
                     actor_label: str = "") -> ApiToken:
    """Revoke for good (idempotent: a revoked token stays revoked with its first reason)."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().get(pk=token.pk)
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.revoked_reason = (reason or "revoked")[:200]
            token.save(update_fields=["revoked_at", "revoked_reason"])
            audit_record(actor=actor, via=via, action="api_token.revoke", target_type="accounts.apitoken",
                         target_id=token.key_id, actor_label=actor_label,
                         detail={"user": token.user.get_username(), "name": token.name, "reason": reason})
    return token


def api_token_authenticate(*, presented: str) -> ApiToken:
    """The live token for a presented value, with its user; 401 with a code otherwise."""
    parts = bearer.split(presented, TOKEN_PREFIX)
    token = None
    if parts:
        token = ApiToken.objects.select_related("user").filter(key_id=parts[0]).first()
    if token is None or not bearer.matches(parts[1], token.secret_hash):
        raise NotAuthenticated("authentication_failed", "This API token is not known to Host.")
    if token.revoked_at is not None:
        raise NotAuthenticated("token_revoked", "This API token was revoked; ask for a new one.")
    if token.expires_at <= timezone.now():
        raise NotAuthenticated("token_expired", "This API token has expired; ask for a new one.")
    if not token.user.is_active:
        raise NotAuthenticated("user_inactive", "The user of this API token is inactive.")
    return token


def _role(name: str) -> Group:
    if name not in roles.ROLES:
        raise ValidationFailed("unknown_role", f"No role '{name}'; roles are: {', '.join(roles.ROLES)}.",
                               field="role")
    group = Group.objects.filter(name=name).first()
    if group is None:
        raise NotFound("role_missing", f"Role '{name}' is not in the database; run 'manage.py roles sync'.",
                       field="role")
    return group


def role_grant(*, username: str, role: str, actor=None, via: str = AuditVia.COMMAND, actor_label: str = ""):
    user = _user(username)
    group = _role(role)
    with transaction.atomic():
        user.groups.add(group)
        if role in roles.ADMIN_SITE_ROLES and not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        audit_record(actor=actor, via=via, action="role.grant", target_type="auth.user", target_id=user.pk,
                     actor_label=actor_label, detail={"user": username, "role": role})
    return user


def role_revoke(*, username: str, role: str, actor=None, via: str = AuditVia.COMMAND, actor_label: str = ""):
    user = _user(username)
    group = _role(role)
    with transaction.atomic():
        user.groups.remove(group)
        audit_record(actor=actor, via=via, action="role.revoke", target_type="auth.user", target_id=user.pk,
                     actor_label=actor_label, detail={"user": username, "role": role})
    return user


def team_ensure(*, slug: str, name: str = "") -> Team:
    if not _TEAM_SLUG.match(slug or ""):
        raise ValidationFailed("invalid_team", "A team slug is 1..100 lowercase letters, digits, '-' or '_'.",
                               field="team")
    team, _ = Team.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return team


def team_member_set(*, slug: str, username: str, member: bool, actor=None, via: str = AuditVia.COMMAND,
                    actor_label: str = "") -> Team:
    """Add (creating the team if needed) or remove one member."""
    user = _user(username)
    with transaction.atomic():
        if member:
            team = team_ensure(slug=slug)
            team.members.add(user)
        else:
            team = Team.objects.filter(slug=slug).first()
            if team is None:
                raise NotFound("team_not_found", f"No team '{slug}'.", field="team")
            team.members.remove(user)
        audit_record(actor=actor, via=via, action="team.member_add" if member else "team.member_remove",
                     target_type="accounts.team", target_id=slug, team=slug, actor_label=actor_label,
                     detail={"user": username})
    return team


def roles_sync(*, permission_model=Permission, group_model=Group, content_type_model=ContentType) -> list[str]:
    """Make each role group hold exactly the permissions of ``roles.ROLES`` (creating missing permission
    rows, as Django's post_migrate would). Idempotent. The model parameters let the data migration pass
    its historical models. Returns the role names."""
    for name, perms in roles.ROLES.items():
        group, _ = group_model.objects.get_or_create(name=name)
        wanted = []
        for dotted in sorted(perms):
            app_label, codename = dotted.split(".", 1)
            action, _, model = codename.partition("_")
            if dotted == roles.ANY_TEAM:
                model, label = "team", "Can see and act on every team's work"
            else:
                label = f"Can {action} {model}"
            content_type, _ = content_type_model.objects.get_or_create(app_label=app_label, model=model)
            permission = permission_model.objects.filter(content_type=content_type, codename=codename).first()
            if permission is None:
                permission = permission_model.objects.create(content_type=content_type, codename=codename,
                                                             name=label)
            wanted.append(permission)
        group.permissions.set(wanted)
    return list(roles.ROLES)


def password_check(*, password: str, user) -> None:
    """Django's ``AUTH_PASSWORD_VALIDATORS`` for a password about to be set on ``user`` (saved or not): every
    path that sets one calls this (Django's own forms and ``changepassword``/``createsuperuser`` run the
    same validators). 400 ``password_invalid`` with the validators' sentences."""
    try:
        validate_password(password, user=user)
    except DjangoValidationError as exc:
        raise ValidationFailed("password_invalid", "Choose another password: " + " ".join(exc.messages),
                               field="password") from None


def user_create(*, username: str, email: str = "", password: str | None = None, actor=None,
                via: str = AuditVia.COMMAND, actor_label: str = ""):
    """A person who can log in (roles and teams are granted apart: ``role_grant``, ``team_member_set``).
    Without a password the account cannot log in with one until ``changepassword`` sets it; a password
    given must pass the validators (``password_check``). Audited."""
    username = (username or "").strip()
    model = get_user_model()
    if not username:
        raise ValidationFailed("field_blank", "Give a username.", field="username")
    if model.objects.filter(username=username).exists():
        raise Conflict("user_exists", f"A user '{username}' already exists.", field="username")
    if password is not None:
        password_check(password=password, user=model(username=username, email=email))
    with transaction.atomic():
        user = model.objects.create_user(username=username, email=email, password=password)
        audit_record(actor=actor, via=via, action="user.create", target_type="auth.user", target_id=user.pk,
                     actor_label=actor_label, detail={"user": username})
    return user


def team_create(*, slug: str, name: str = "", actor=None, via: str = AuditVia.COMMAND, actor_label: str = "") -> Team:
    """A new team (members come with ``team_member_set``). Audited; an existing slug is refused."""
    if Team.objects.filter(slug=slug).exists():
        raise Conflict("team_exists", f"A team '{slug}' already exists.", field="team")
    with transaction.atomic():
        team = team_ensure(slug=slug, name=name)
        audit_record(actor=actor, via=via, action="team.create", target_type="accounts.team", target_id=slug,
                     team=slug, actor_label=actor_label, detail={"name": team.name})
    return team
