"""Reads for accounts, and the team rules every app applies to its work.

The rules (docs/permissions.md):
- A user sees and acts on work of the teams they belong to; ``accounts.act_for_any_team`` (staff admin,
  superusers) reaches every team's work and team-less work.
- A write names its team in ``team``. Omitted: a user of exactly one team writes for it; a user of several
  must say which (400 ``team_required``); a user of none is refused (403 ``no_team``). Naming a team the
  user is not in is 403 ``team_forbidden``. A staff admin may name any team, or none.
"""
from __future__ import annotations

from django.db.models import QuerySet

from apps.accounts.models import ApiToken, Team
from apps.accounts.roles import ANY_TEAM, roles_granting
from apps.core.errors import Forbidden, NotAuthenticated, ValidationFailed

# How a list shows work of teams the reader does not belong to when it may only count it.
OTHER_TEAMS = "(other teams)"


def user_team_slugs(user) -> list[str]:
    """The caller's team slugs, cached on the user object for the request."""
    cached = getattr(user, "_forest_team_slugs", None)
    if cached is None:
        cached = sorted(Team.objects.filter(members=user).values_list("slug", flat=True)) if user.pk else []
        user._forest_team_slugs = cached
    return cached


def acts_for_any_team(user) -> bool:
    return bool(getattr(user, "is_authenticated", False)) and user.has_perm(ANY_TEAM)


def visible(queryset: QuerySet, user, *, team_field: str = "team") -> QuerySet:
    """``queryset`` narrowed to what ``user`` may see."""
    if acts_for_any_team(user):
        return queryset
    return queryset.filter(**{f"{team_field}__in": user_team_slugs(user)})


def team_authorize(user, team: str, *, what: str = "this") -> None:
    """Refuse (403 ``team_forbidden``) when ``user`` may not act on work of ``team``."""
    if acts_for_any_team(user):
        return
    if not team or team not in user_team_slugs(user):
        owner = f"team '{team}'" if team else "no team"
        raise Forbidden("team_forbidden", f"{what[:1].upper()}{what[1:]} belongs to {owner}, and you are not "
                        "a member; a staff admin can add you to the team.", field="team",
                        extra={"team": team})


def permission_refusal(permission: str) -> Forbidden:
    """403 ``permission_required`` naming the permission and the roles that grant it."""
    granted_by = roles_granting(permission)
    roles = f" (role: {' or '.join(granted_by)})" if granted_by else ""
    return Forbidden("permission_required", f"This needs the permission '{permission}'{roles}.",
                     extra={"permission": permission})


def authorize(user, permission: str, *, team: str | None = None, what: str = "this") -> None:
    """The one check of an action on team-owned work, whatever door it came through (API, staff page,
    admin action, command): the role's permission (403 ``permission_required``), then, when the work has
    an owner (``team`` not None; "" is team-less work), the team rule (403 ``team_forbidden``)."""
    if not getattr(user, "is_authenticated", False) or not getattr(user, "pk", None):
        raise NotAuthenticated("not_authenticated", "Sign in, or send 'Authorization: Token <key>'.")
    if not user.is_active or not user.has_perm(permission):
        raise permission_refusal(permission)
    if team is not None:
        team_authorize(user, team, what=what)


def may(user, permission: str, *, team: str | None = None) -> bool:
    """Whether ``authorize`` would let ``user`` act (for showing or hiding a button; the action itself
    still calls ``authorize``)."""
    try:
        authorize(user, permission, team=team)
    except (Forbidden, NotAuthenticated):
        return False
    return True


def team_label(user, team: str) -> str:
    """A team's name as ``user`` may read it in an aggregate: their own teams (or every team, for a role
    that spans all) by name, any other as ``OTHER_TEAMS``."""
    if acts_for_any_team(user) or (team and team in user_team_slugs(user)):
        return team or "(no team)"
    return OTHER_TEAMS


def team_for_write(user, requested) -> str:
    """The team a new piece of work is written for (rules in the module docstring)."""
    if requested is not None and not isinstance(requested, str):
        raise ValidationFailed("invalid_type", "team must be a string.", field="team")
    requested = (requested or "").strip()
    if acts_for_any_team(user):
        return requested
    teams = user_team_slugs(user)
    if requested:
        if requested not in teams:
            raise Forbidden("team_forbidden", f"You are not a member of team '{requested}'.", field="team",
                            extra={"team": requested})
        return requested
    if len(teams) == 1:
        return teams[0]
    if not teams:
        raise Forbidden("no_team", "Your user belongs to no team, so it cannot submit work; a staff admin "
                        "can add you to one (manage.py teams add TEAM USER).", field="team")
    raise ValidationFailed("team_required", f"You belong to several teams ({', '.join(teams)}); name one in "
                           "'team'.", field="team")


def body_with_team(user, body):
    """A copy of a JSON object body with ``team`` resolved for ``user``; other bodies pass through for the
    service to refuse with its own error."""
    if not isinstance(body, dict):
        return body
    team = team_for_write(user, body.get("team"))
    # A staff admin writing team-less work: the body stays exactly as sent.
    return {**body, "team": team} if team else body


def api_token_list(*, user=None) -> QuerySet[ApiToken]:
    qs = ApiToken.objects.select_related("user")
    return qs.filter(user=user) if user is not None else qs
