"""``manage.py users create USERNAME [--email E] [--password-stdin] [--role ROLE]... [--team TEAM]...`` and
``users list``: the people ``roles grant`` and ``teams add`` name (audited, through the accounts services)."""
from __future__ import annotations

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from apps.accounts import roles, services
from apps.accounts.management.commands._common import os_actor, refusals_as_errors


class Command(BaseCommand):
    help = "Create a user (optionally with roles and teams), or list users with their roles and teams."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Each user with roles and teams.")
        create = sub.add_parser("create", help="Create a user; set the password with --password-stdin or later "
                                               "with `manage.py changepassword USERNAME`.")
        create.add_argument("username")
        create.add_argument("--email", default="")
        create.add_argument("--password-stdin", action="store_true", help="Read the password from standard input.")
        create.add_argument("--role", action="append", default=[], choices=list(roles.ROLES),
                            help="Grant this role (repeatable).")
        create.add_argument("--team", action="append", default=[], help="Add to this team (repeatable; created "
                                                                          "if new).")

    def handle(self, *args, **options):
        actor = os_actor("users")
        with refusals_as_errors():
            if options["action"] == "list":
                for user in get_user_model().objects.prefetch_related("groups", "forest_teams").order_by("username"):
                    groups = ", ".join(sorted(g.name for g in user.groups.all())) or "-"
                    teams = ", ".join(sorted(t.slug for t in user.forest_teams.all())) or "-"
                    self.stdout.write(f"{user.get_username()}: roles {groups}; teams {teams}")
                return
            password = sys.stdin.readline().rstrip("\n") if options["password_stdin"] else None
            user = services.user_create(username=options["username"], email=options["email"], password=password,
                                        actor_label=actor)
            for role in options["role"]:
                services.role_grant(username=user.get_username(), role=role, actor_label=actor)
            for team in options["team"]:
                services.team_member_set(slug=team, username=user.get_username(), member=True, actor_label=actor)
            tail = "" if password else f"; set a password with `manage.py changepassword {user.get_username()}`"
            self.stdout.write(f"created user {user.get_username()}{tail}")
