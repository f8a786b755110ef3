"""``manage.py flags list`` and ``manage.py flags set NAME on|off --reason TEXT [--environment ID] [--team SLUG]``."""
from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ForestError
from apps.flags import services
from apps.flags.choices import FlagScope
from apps.flags.selectors import flag_rows, invalidate


class Command(BaseCommand):
    help = "List feature flags, or set/clear an override (audited like an admin change)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Every flag with its default and effective value.")
        for action, helptext in (("set", "Turn a flag on or off for a scope."),
                                 ("clear", "Remove an override so the scope falls back.")):
            cmd = sub.add_parser(action, help=helptext)
            cmd.add_argument("name")
            if action == "set":
                cmd.add_argument("value", choices=["on", "off"])
            cmd.add_argument("--reason", required=True, help="Why; kept in the audit log.")
            scope = cmd.add_mutually_exclusive_group()
            scope.add_argument("--environment", help="Override only for this environment id.")
            scope.add_argument("--team", help="Override only for this team slug.")
            cmd.add_argument("--actor", default="", help="Who is acting (default: the OS user).")

    def handle(self, *args, **options):
        invalidate()
        if options["action"] == "list":
            return self._list()
        scope, scope_value = FlagScope.GLOBAL, ""
        if options.get("environment"):
            scope, scope_value = FlagScope.ENVIRONMENT, options["environment"]
        elif options.get("team"):
            scope, scope_value = FlagScope.TEAM, options["team"]
        actor_label = options["actor"] or f"manage.py flags ({_os_user()})"
        try:
            if options["action"] == "set":
                services.flag_override_set(
                    name=options["name"], enabled=options["value"] == "on", reason=options["reason"],
                    scope=scope, scope_value=scope_value, actor_label=actor_label,
                )
                self.stdout.write(f"{options['name']} [{scope}{'=' + scope_value if scope_value else ''}] "
                                  f"= {options['value']}")
            else:
                removed = services.flag_override_clear(
                    name=options["name"], reason=options["reason"], scope=scope, scope_value=scope_value,
                    actor_label=actor_label,
                )
                self.stdout.write("override removed" if removed else "no such override; nothing changed")
        except ForestError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from None

    def _list(self) -> None:
        rows = flag_rows()
        width = max(len(row["name"]) for row in rows)
        self.stdout.write(f"{'NAME':<{width}}  DEFAULT  EFFECTIVE  SOURCE    SCOPED OVERRIDES")
        for row in rows:
            self.stdout.write(
                f"{row['name']:<{width}}  {_onoff(row['default']):<7}  {_onoff(row['effective']):<9}  "
                f"{row['source']:<8}  {', '.join(row['scoped']) or '-'}"
            )


def _onoff(value: bool) -> str:
    return "on" if value else "off"


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"
