"""``manage.py teams list``, ``teams create TEAM [--name NAME]``, ``teams add TEAM USER`` (creates the team if
new), ``teams remove TEAM USER``."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from apps.accounts import services
from apps.accounts.management.commands._common import os_actor, refusals_as_errors
from apps.accounts.models import Team


class Command(BaseCommand):
    help = "List teams, or add/remove a member (audited). Team slugs are the 'team' of work and entitlements."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("list", help="Each team and its members.")
        create = sub.add_parser("create", help="Create a team (audited).")
        create.add_argument("team")
        create.add_argument("--name", default="")
        for action in ("add", "remove"):
            cmd = sub.add_parser(action, help=f"{action.capitalize()} a member.")
            cmd.add_argument("team")
            cmd.add_argument("username")

    def handle(self, *args, **options):
        with refusals_as_errors():
            if options["action"] == "list":
                for team in Team.objects.prefetch_related("members"):
                    members = ", ".join(sorted(u.get_username() for u in team.members.all())) or "-"
                    self.stdout.write(f"{team.slug}: {members}")
                return
            if options["action"] == "create":
                team = services.team_create(slug=options["team"], name=options["name"], actor_label=os_actor("teams"))
                self.stdout.write(f"created team {team.slug}")
                return
            add = options["action"] == "add"
            services.team_member_set(slug=options["team"], username=options["username"], member=add,
                                     actor_label=os_actor("teams"))
            self.stdout.write(f"{'added' if add else 'removed'} {options['username']} "
                              f"{'to' if add else 'from'} team {options['team']}")
