"""Print the capability status table, or write it into README.md (``--write``) / fail if stale (``--check``)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.flags.registry import FLAGS
from apps.staff import capabilities


def readme_path() -> Path:
    return Path(settings.BASE_DIR) / "README.md"


def rendered_readme() -> tuple[str, str]:
    """(current README, README with a freshly generated table)."""
    table = capabilities.markdown_table({name: flag.default for name, flag in FLAGS.items()})
    current = readme_path().read_text()
    return current, capabilities.readme_with_table(current, table)


class Command(BaseCommand):
    help = "The capability status registry as a Markdown table (apps/staff/capabilities.py)."

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--write", action="store_true", help="Rewrite the table in README.md")
        group.add_argument("--check", action="store_true", help="Exit 1 if README.md's table is stale")

    def handle(self, *args, write: bool = False, check: bool = False, **options):
        missing = capabilities.missing_flags(FLAGS)
        if missing:
            raise CommandError(f"Flags with no capability row: {', '.join(missing)} (apps/staff/capabilities.py).")
        current, fresh = rendered_readme()
        if write:
            readme_path().write_text(fresh)
            self.stdout.write("README.md capability table updated.")
        elif check:
            if current != fresh:
                raise CommandError("README.md's capability table is stale: run manage.py capability_status --write.")
            self.stdout.write("README.md capability table is current.")
        else:
            self.stdout.write(capabilities.markdown_table({n: f.default for n, f in FLAGS.items()}))
