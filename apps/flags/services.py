"""Writing flags: every change goes through ``flag_override_set``/``flag_override_clear`` and is audited."""
from __future__ import annotations

import logging

from django.db import transaction

from apps.accounts.choices import AuditVia
from apps.accounts.services import audit_record
from apps.core.errors import ValidationFailed
from apps.flags.choices import FlagScope
from apps.flags.models import Flag, FlagAudit, FlagOverride
from apps.flags.registry import FLAGS, UnknownFlag, definition
from apps.flags.selectors import invalidate

log = logging.getLogger(__name__)


def flag_registry_sync() -> None:
    """Mirror the code registry into ``Flag`` rows (run after every migrate)."""
    for flag in FLAGS.values():
        Flag.objects.update_or_create(
            name=flag.name,
            defaults={"default": flag.default, "stage": flag.stage, "description": flag.description},
        )


def _check_scope(scope: str, scope_value: str) -> tuple[str, str]:
    if scope not in FlagScope.values:
        raise ValidationFailed("invalid_flag_scope", f"Scope must be one of {', '.join(FlagScope.values)}.")
    scope_value = (scope_value or "").strip()
    if scope == FlagScope.GLOBAL and scope_value:
        raise ValidationFailed("invalid_flag_scope", "A global override takes no environment or team.")
    if scope != FlagScope.GLOBAL and not scope_value:
        raise ValidationFailed("invalid_flag_scope", f"A {scope} override needs the {scope} it applies to.")
    return scope, scope_value


def _flag_row(name: str) -> Flag:
    try:
        flag = definition(name)
    except UnknownFlag as exc:
        raise ValidationFailed("unknown_flag", str(exc), field="name") from None
    row, _ = Flag.objects.get_or_create(
        name=name, defaults={"default": flag.default, "stage": flag.stage, "description": flag.description}
    )
    return row


def _audit(*, flag: Flag, scope: str, scope_value: str, old: bool | None, new: bool | None,
           actor, actor_label: str, reason: str, via: str) -> FlagAudit:
    if not reason or not reason.strip():
        raise ValidationFailed("reason_required", "Say why the flag changes (--reason / the reason field).")
    entry = FlagAudit.objects.create(
        flag=flag, scope=scope, scope_value=scope_value, old_value=old, new_value=new,
        actor=actor if getattr(actor, "pk", None) else None,
        actor_label=actor_label or (actor.get_username() if getattr(actor, "pk", None) else "system"),
        reason=reason.strip(),
    )
    # The flag's own history (its admin page) and the one trail of every staff write (*Audit events*).
    audit_record(actor=actor, via=via, action="flag.override_clear" if new is None else "flag.override_set",
                 target_type="flags.flag", target_id=flag.name, actor_label=entry.actor_label,
                 team=scope_value if scope == FlagScope.TEAM else "",
                 detail={"scope": scope, "scope_value": scope_value, "old": old, "new": new,
                         "reason": entry.reason})
    log.info("flag changed", extra={"flag": flag.name, "scope": scope, "scope_value": scope_value,
                                    "old": old, "new": new, "actor": entry.actor_label})
    return entry


@transaction.atomic
def flag_override_set(*, name: str, enabled: bool, reason: str, scope: str = FlagScope.GLOBAL,
                      scope_value: str = "", actor=None, actor_label: str = "",
                      via: str = AuditVia.COMMAND) -> FlagOverride:
    """Turn a flag on or off for a scope, writing an audit row (even when the value is unchanged)."""
    scope, scope_value = _check_scope(scope, scope_value)
    flag = _flag_row(name)
    existing = FlagOverride.objects.select_for_update().filter(flag=flag, scope=scope, scope_value=scope_value).first()
    old = existing.enabled if existing else None
    if existing:
        existing.enabled = enabled
        existing.updated_by = actor if getattr(actor, "pk", None) else None
        existing.save(update_fields=["enabled", "updated_by", "updated_at"])
        override = existing
    else:
        override = FlagOverride.objects.create(
            flag=flag, scope=scope, scope_value=scope_value, enabled=enabled,
            updated_by=actor if getattr(actor, "pk", None) else None,
        )
    _audit(flag=flag, scope=scope, scope_value=scope_value, old=old, new=enabled,
           actor=actor, actor_label=actor_label, reason=reason, via=via)
    transaction.on_commit(invalidate)
    return override


@transaction.atomic
def flag_override_clear(*, name: str, reason: str, scope: str = FlagScope.GLOBAL, scope_value: str = "",
                        actor=None, actor_label: str = "", via: str = AuditVia.COMMAND) -> bool:
    """Remove an override so the scope falls back to the next one (or the default). True if one existed."""
    scope, scope_value = _check_scope(scope, scope_value)
    flag = _flag_row(name)
    existing = FlagOverride.objects.select_for_update().filter(flag=flag, scope=scope, scope_value=scope_value).first()
    if existing is None:
        return False
    old = existing.enabled
    existing.delete()
    _audit(flag=flag, scope=scope, scope_value=scope_value, old=old, new=None,
           actor=actor, actor_label=actor_label, reason=reason, via=via)
    transaction.on_commit(invalidate)
    return True
