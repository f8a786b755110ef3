"""``manage.py roles list|sync``, ``roles grant USER ROLE`` and ``roles revoke USER ROLE``."""
from __future__ import annotations

from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand

from apps.accounts import roles, services
from apps.accounts.management.commands._common import os_actor, refusals_as_errors


class Command(BaseCommand):
    help = "List the roles, re-sync their permissions, or grant/revoke a role (audited)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Each role, its permissions and its members.")
        sub.add_parser("sync", help="Make each role group hold exactly its permissions (idempotent).")
        for action in ("grant", "revoke"):
            cmd = sub.add_parser(action, help=f"{action.capitalize()} a role.")
            cmd.add_argument("username")
            cmd.add_argument("role", choices=list(roles.ROLES))

    def handle(self, *args, **options):
        action = options["action"]
        with refusals_as_errors():
            if action == "sync":
                self.stdout.write("synced: " + ", ".join(services.roles_sync()))
            elif action == "list":
                for name, perms in roles.ROLES.items():
                    group = Group.objects.filter(name=name).first()
                    members = sorted(group.user_set.values_list("username", flat=True)) if group else []
                    self.stdout.write(f"{name}: {len(perms)} permissions; members: {', '.join(members) or '-'}")
                    for perm in sorted(perms):
                        self.stdout.write(f"    {perm}")
            else:
                service = services.role_grant if action == "grant" else services.role_revoke
                service(username=options["username"], role=options["role"], actor_label=os_actor("roles"))
                self.stdout.write(f"{action}ed '{options['role']}' {'to' if action == 'grant' else 'from'} "
                                  f"{options['username']}")
