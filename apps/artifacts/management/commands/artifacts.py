"""``manage.py artifacts provision-bucket [--dry-run]`` and ``manage.py artifacts gc [--dry-run]``."""
from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from apps.artifacts import services
from apps.artifacts.s3 import bucket_provision
from apps.core.errors import ForestError


class Command(BaseCommand):
    help = "Operate the artifact store: create the S3 bucket, or garbage-collect unreferenced blobs."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        provision = sub.add_parser(
            "provision-bucket",
            help="Create FOREST_CAS_S3_BUCKET through the S3 API (SigV4), idempotently. --dry-run checks the "
                 "name, reachability, credentials, whether the bucket exists and is yours, and the region, and "
                 "says whether creation would succeed, without creating anything.")
        provision.add_argument("--dry-run", action="store_true", help="Check every step; create nothing.")
        gc = sub.add_parser("gc", help="Remove unreferenced CAS blobs older than FOREST_CAS_GC_GRACE_S "
                                       "(a missing bucket is reported and skipped).")
        gc.add_argument("--dry-run", action="store_true", help="Count what would be removed; remove nothing.")
        gc.add_argument("--grace-s", type=float, default=None, help="Override the grace period (seconds).")

    def handle(self, *args, **options):
        try:
            if options["action"] == "provision-bucket":
                return self._provision(options["dry_run"])
            report = services.artifact_gc(dry_run=options["dry_run"], grace_s=options["grace_s"])
        except ForestError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from None
        self.stdout.write(json.dumps(report, sort_keys=True))
        if report["skipped"]:
            self.stderr.write(f"gc skipped: {report['skipped']}")

    def _provision(self, dry_run: bool) -> None:
        config = services.s3_settings()
        report = bucket_provision(config, dry_run=dry_run)
        for step in report.steps:
            self.stdout.write(f"[{'ok' if step.ok else 'FAIL'}] {step.name}: {step.detail}")
        if not report.ok:
            raise CommandError(f"bucket '{config.bucket}' is not provisioned: "
                               f"{next(s for s in report.steps if not s.ok).detail}")
        if dry_run:
            self.stdout.write("dry run: " + ("creation would succeed" if report.would_create
                                             else "the bucket already exists; nothing to do"))
        else:
            self.stdout.write("created" if report.created else "already present; nothing changed")
