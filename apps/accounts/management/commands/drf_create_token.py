"""``manage.py drf_create_token USER`` — kept so existing scripts work: it makes a hashed, expiring token
named ``drf_create_token`` (``-r`` replaces a live one of that name) and prints it once, as DRF did.
Prefer ``manage.py api_token create USER --name CLIENT``."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts import services
from apps.accounts.management.commands._common import os_actor, refusals_as_errors
from apps.accounts.models import ApiToken

NAME = "drf_create_token"


class Command(BaseCommand):
    help = "Make an API token for USER and print it once (compatibility name of 'api_token create')."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("-r", "--reset", action="store_true", help="Revoke the user's earlier token of "
                            "this command and make a new one.")
        parser.add_argument("--name", default=NAME, help=f"Token name (default {NAME}).")

    def handle(self, *args, **options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"Cannot create the Token: user {options['username']} does not exist")
        actor = os_actor("drf_create_token")
        with refusals_as_errors():
            live = ApiToken.objects.filter(user=user, name=options["name"], revoked_at__isnull=True).first()
            if live is not None:
                if not options["reset"]:
                    raise CommandError(f"token_name_taken: {user.get_username()} already has a live token named "
                                       f"'{options['name']}' (key id {live.key_id}); its secret cannot be shown "
                                       "again. Use -r to replace it.")
                services.api_token_revoke(token=live, reason="replaced by drf_create_token -r", actor_label=actor)
            _, presented = services.api_token_create(user=user, name=options["name"], actor_label=actor)
        self.stdout.write(f"Generated token {presented} for user {user.get_username()}")
