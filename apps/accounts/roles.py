"""The roles: Django groups of model permissions. Pure: no Django import.

A role is a group whose permissions are exactly this table (``manage.py roles sync`` re-applies it;
the data migration ``0002_roles`` creates it). What a permission lets a user touch is further scoped
by team (``apps.accounts.selectors``): only ``accounts.act_for_any_team`` (staff admin) reaches every
team's work. See docs/permissions.md for the table in words.
"""
from __future__ import annotations

VIEWER = "viewer"
SUBMITTER = "submitter"
WORKLOAD_OPERATOR = "workload operator"
STAFF_ADMIN = "staff admin"

ANY_TEAM = "accounts.act_for_any_team"

_READ = frozenset({
    "groves.view_grove",
    "placement.view_executionplacement",
    "pipelines.view_pipelinerun",
    "compute.view_computejob",
    "workloads.view_nativeworkload",
    "artifacts.view_artifact",
    "ingress.view_ingressroute",
})
_SUBMIT = frozenset({
    "compute.add_computejob",
    "compute.change_computejob",  # cancel
    "pipelines.add_pipelinerun",
    "pipelines.change_pipelinerun",  # cancel
    "artifacts.add_artifact",  # upload inputs
})
_OPERATE = frozenset({
    "workloads.add_nativeworkload",
    "workloads.change_nativeworkload",
    "workloads.delete_nativeworkload",
    "workloads.add_workloadsecret",
    "workloads.change_workloadsecret",
    "artifacts.add_artifact",  # upload bundles
})
_ADMIN = frozenset({
    ANY_TEAM,
    "placement.change_executionplacement",  # re-place
    "flags.view_flag", "flags.change_flag",
    "flags.view_flagoverride", "flags.add_flagoverride", "flags.change_flagoverride",
    "flags.delete_flagoverride", "flags.view_flagaudit",
    "accelerators.view_acceleratorentitlement", "accelerators.add_acceleratorentitlement",
    "accelerators.change_acceleratorentitlement", "accelerators.delete_acceleratorentitlement",
    "accelerators.view_acceleratorclaim", "accelerators.view_acceleratorusage",
    "accounts.view_apitoken", "accounts.add_apitoken", "accounts.change_apitoken", "accounts.delete_apitoken",
    "accounts.view_team", "accounts.add_team", "accounts.change_team",
    "accounts.view_auditevent",
    "auth.view_user", "auth.change_user", "auth.view_group",
    "groves.view_enrollmenttoken", "groves.add_enrollmenttoken", "groves.view_grovecredential",
    "groves.change_grovecredential",
})

ROLES: dict[str, frozenset[str]] = {
    VIEWER: _READ,
    SUBMITTER: _READ | _SUBMIT,
    WORKLOAD_OPERATOR: _READ | _OPERATE,
    STAFF_ADMIN: _READ | _SUBMIT | _OPERATE | _ADMIN,
}
# Every role is a staff role: granting one sets ``is_staff`` so its holder can sign in to the staff pages
# and the admin site, where each sees only what its permissions allow.
ADMIN_SITE_ROLES = frozenset(ROLES)


def roles_granting(permission: str) -> list[str]:
    """The roles that hold ``permission``, least powerful first (for a refusal's sentence)."""
    return [name for name, perms in ROLES.items() if permission in perms]
