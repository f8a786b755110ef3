"""``manage.py api_token create USER --name CLIENT [--expires-in DAYS]`` (prints the token once),
``api_token list [USER]`` and ``api_token revoke KEY_ID --reason TEXT``."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts import selectors, services
from apps.accounts.management.commands._common import os_actor, refusals_as_errors
from apps.accounts.models import ApiToken


class Command(BaseCommand):
    help = "Make, list and revoke staff/CI API tokens (hashed at rest; a new token is printed once)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="Make a token for USER and print it once.")
        create.add_argument("username")
        create.add_argument("--name", required=True, help="The client that will hold it, e.g. ci-main.")
        create.add_argument("--expires-in", type=int, default=None, metavar="DAYS",
                            help="Days until it expires (default API_TOKEN_DEFAULT_TTL_DAYS, at most 366).")
        listing = sub.add_parser("list", help="Tokens (never their secrets), newest first.")
        listing.add_argument("username", nargs="?")
        revoke = sub.add_parser("revoke", help="Revoke a token for good, by its key id.")
        revoke.add_argument("key_id")
        revoke.add_argument("--reason", required=True, help="Why; kept in the audit trail.")

    def handle(self, *args, **options):
        with refusals_as_errors():
            getattr(self, f"_{options['action']}")(options)

    def _create(self, options):
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"user_not_found: No user '{options['username']}'.")
        token, presented = services.api_token_create(user=user, name=options["name"],
                                                     expires_in_days=options["expires_in"],
                                                     actor_label=os_actor("api_token"))
        self.stderr.write(f"token '{token.name}' for {user.get_username()}, key id {token.key_id}, "
                          f"expires {token.expires_at:%Y-%m-%d}; it is shown only now:")
        self.stdout.write(presented)

    def _list(self, options):
        user = None
        if options["username"]:
            user = get_user_model().objects.filter(username=options["username"]).first()
            if user is None:
                raise CommandError(f"user_not_found: No user '{options['username']}'.")
        self.stdout.write(f"{'KEY ID':<16}  {'USER':<20}  {'NAME':<24}  {'EXPIRES':<10}  STATE")
        for token in selectors.api_token_list(user=user):
            state = "revoked" if token.revoked_at else ("live" if token.live else "expired")
            self.stdout.write(f"{token.key_id:<16}  {token.user.get_username():<20}  {token.name:<24}  "
                              f"{token.expires_at:%Y-%m-%d}  {state}")

    def _revoke(self, options):
        token = ApiToken.objects.filter(key_id=options["key_id"]).first()
        if token is None:
            raise CommandError(f"token_not_found: No token with key id '{options['key_id']}'.")
        services.api_token_revoke(token=token, reason=options["reason"], actor_label=os_actor("api_token"))
        self.stdout.write(f"revoked {token.key_id} ({token.name})")
