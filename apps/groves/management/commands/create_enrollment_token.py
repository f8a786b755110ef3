"""Print a one-time enrollment token, alone on the last line so scripts can capture it."""
from django.core.management.base import BaseCommand, CommandError

from apps.core.errors import ForestError
from apps.groves.services import enrollment_token_create


class Command(BaseCommand):
    help = "Create a one-time enrollment token for a new Grove (printed once, alone on the last line)."

    def add_arguments(self, parser):
        parser.add_argument("--roles", required=True, help="Comma-separated: build,runtime,compute")
        parser.add_argument("--substrate", required=True, choices=["native", "kubernetes"])
        parser.add_argument("--expires-in", type=int, default=None, metavar="SECONDS",
                            help="Lifetime in seconds (default: ENROLLMENT_TOKEN_DEFAULT_TTL_S, 24 h).")
        parser.add_argument("--note", default="", help="Free text shown in admin (who/what it is for).")

    def handle(self, *args, **options):
        try:
            token, presented = enrollment_token_create(
                roles=options["roles"].split(","), substrate=options["substrate"],
                expires_in_s=options["expires_in"], note=options["note"],
            )
        except ForestError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from None
        self.stderr.write(
            f"Enrollment token for a {token.substrate} Grove with roles {', '.join(token.roles)}; "
            f"expires {token.expires_at:%Y-%m-%d %H:%M:%S} UTC; shown once:"
        )
        self.stdout.write(presented)
