"""Load the demo estate and a local staff login; with ``--simulate`` keep the demo Groves heartbeating."""
import secrets
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from apps.accounts.services import password_check
from apps.groves.demo import demo_heartbeat, demo_load


class Command(BaseCommand):
    help = "Create demo Groves (with capacity reports) and a local 'admin' login, printed once."

    def add_arguments(self, parser):
        parser.add_argument("--simulate", action="store_true",
                            help="Then heartbeat for the simulated Groves every --interval seconds until Ctrl-C.")
        parser.add_argument("--interval", type=float, default=20.0)

    def handle(self, *args, **options):
        if options["simulate"]:
            return self._simulate(options["interval"])
        user_model = get_user_model()
        if not user_model.objects.filter(username="admin").exists():
            password = secrets.token_urlsafe(12)
            password_check(password=password, user=user_model(username="admin", email="admin@localhost"))
            user_model.objects.create_superuser("admin", "admin@localhost", password)
            self.stdout.write(self.style.WARNING(
                f"Created staff login  admin / {password}   (shown once; change it with "
                f"`.venv/bin/python manage.py changepassword admin`)"))
        groves = demo_load()
        self.stdout.write(f"Demo Groves loaded, simulated (they report; nothing runs their jobs, so unpinned work "
                          f"never lands on them): {', '.join(g.slug for g in groves)}")

    def _simulate(self, interval: float) -> None:
        self.stdout.write(f"Heartbeating the simulated demo Groves every {interval:g}s (Ctrl-C stops).")
        try:
            while True:
                demo_heartbeat()
                time.sleep(interval)
        except KeyboardInterrupt:
            pass
