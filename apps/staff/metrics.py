"""Forest's own Prometheus metrics, read from the database at scrape time.

The database is the source of truth and Host runs as many processes, so per-process counters would
disagree between replicas; a scrape instead runs a handful of grouped queries over indexed columns
(recent windows only, never whole history). Served next to django-prometheus's process metrics on
``/metrics``, behind a staff session or ``FOREST_METRICS_TOKEN``.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Min, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from apps.core.selectors import process_liveness
from apps.dispatch.models import GroveJob
from apps.dispatch.selectors import unclaimed_count
from apps.groves.models import Grove
from apps.pipelines.models import PipelineNode, PipelineOutbox
from apps.pipelines.vocabulary import NodeStatus
from apps.placement.models import ExecutionPlacement
from apps.placement.outcome import outcome_key
from apps.staff.selectors import LIVE_JOBS, refusal_codes

RECENT = timedelta(hours=1)


class ForestCollector(Collector):
    def collect(self):
        now = timezone.now()
        yield from self._groves(now)
        yield from self._placements(now)
        yield from self._queue(now)
        yield from self._jobs(now)
        yield from self._outbox(now)
        yield from self._processes(now)

    def _groves(self, now):
        cutoff = now - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
        ready_cutoff = now - timedelta(seconds=settings.GROVE_READY_WITHIN_S)
        family = GaugeMetricFamily("forest_groves", "Groves by substrate, state (fresh, stale, disabled) and "
                                   "whether they are simulated (the demo's: nothing runs their jobs).",
                                   labels=["substrate", "state", "simulated"])
        rows = Grove.objects.values("substrate", "simulated").annotate(
            fresh=Count("id", filter=Q(enabled=True, last_heartbeat_at__gte=cutoff)),
            stale=Count("id", filter=Q(enabled=True) & (Q(last_heartbeat_at__lt=cutoff)
                                                         | Q(last_heartbeat_at__isnull=True))),
            disabled=Count("id", filter=Q(enabled=False)),
            unready=Count("id", filter=Q(enabled=True, last_heartbeat_at__gte=cutoff) & (
                Q(last_polled_at__isnull=True) | Q(last_polled_at__lt=ready_cutoff))))
        unready = GaugeMetricFamily("forest_groves_unready",
                                    "Live Groves (fresh heartbeats) that are not ready: no poll or claim within "
                                    "GROVE_READY_WITHIN_S, so placement does not choose them.",
                                    labels=["substrate", "simulated"])
        for row in rows:
            simulated = "true" if row["simulated"] else "false"
            for state in ("fresh", "stale", "disabled"):
                family.add_metric([row["substrate"], state, simulated], row[state])
            unready.add_metric([row["substrate"], simulated], row["unready"])
        yield family
        yield unready
        oldest = Grove.objects.filter(enabled=True).aggregate(oldest=Min("last_heartbeat_at"))["oldest"]
        yield GaugeMetricFamily("forest_grove_oldest_report_age_seconds",
                                "Age of the oldest last report among enabled Groves.",
                                value=(now - oldest).total_seconds() if oldest else 0)

    def _placements(self, now):
        recent = ExecutionPlacement.objects.filter(created_at__gte=now - RECENT)
        family = GaugeMetricFamily("forest_placement_decisions_recent",
                                   "Placement decisions stored in the last hour by outcome (placed, would_refuse, "
                                   "refused, waiting) and chooser.", labels=["outcome", "chooser"])
        counts: dict[tuple[str, str], int] = {}
        for row in recent.values("outcome", "would_refuse", "chooser").annotate(n=Count("id")):
            key = (outcome_key(outcome=row["outcome"], would_refuse=row["would_refuse"]), row["chooser"])
            counts[key] = counts.get(key, 0) + row["n"]
        for (key, chooser), n in sorted(counts.items()):
            family.add_metric([key, chooser], n)
        yield family
        codes = GaugeMetricFamily("forest_placement_incompatibilities_recent",
                                  "Incompatibility codes of refused / would-refuse placements in the last hour.",
                                  labels=["code"])
        for code, n in refusal_codes(since=now - RECENT, until=now + timedelta(seconds=1)):
            codes.add_metric([code], n)
        yield codes

    def _queue(self, now):
        depth = GaugeMetricFamily("forest_pipeline_queue_depth", "Pipeline nodes queued or awaiting a Grove job.",
                                  labels=["status"])
        for status in (NodeStatus.QUEUED, NodeStatus.AWAITING):
            depth.add_metric([status], PipelineNode.objects.filter(status=status).count())
        yield depth
        oldest = PipelineNode.objects.filter(status=NodeStatus.QUEUED).aggregate(o=Min("queued_at"))["o"]
        yield GaugeMetricFamily("forest_pipeline_queue_oldest_wait_seconds",
                                "How long the oldest queued node has waited for dispatch.",
                                value=(now - oldest).total_seconds() if oldest else 0)
        unclaimed = GroveJob.objects.filter(status="assigned").aggregate(o=Min("created_at"))["o"]
        yield GaugeMetricFamily("forest_grove_job_oldest_unclaimed_seconds",
                                "How long the oldest assigned job has waited for its Grove to claim it.",
                                value=(now - unclaimed).total_seconds() if unclaimed else 0)

    def _jobs(self, now):
        live = GaugeMetricFamily("forest_grove_jobs_live", "Grove jobs not yet ended, by status.", labels=["status"])
        for row in GroveJob.objects.filter(status__in=LIVE_JOBS).values("status").annotate(n=Count("id")):
            live.add_metric([row["status"]], row["n"])
        yield live
        yield GaugeMetricFamily("forest_grove_jobs_unclaimed",
                                "Grove jobs assigned and not claimed within GROVE_JOB_UNCLAIMED_AFTER_S (code "
                                "unclaimed).", value=unclaimed_count(now=now))
        ended = GaugeMetricFamily("forest_grove_job_outcomes_recent", "Grove jobs ended in the last hour, by status.",
                                  labels=["status"])
        for row in (GroveJob.objects.filter(finished_at__gte=now - RECENT).values("status")
                    .annotate(n=Count("id"))):
            ended.add_metric([row["status"]], row["n"])
        yield ended

    def _outbox(self, now):
        pending = PipelineOutbox.objects.filter(done_at__isnull=True)
        yield GaugeMetricFamily("forest_outbox_backlog", "Outbox messages (node resumes) not yet consumed.",
                                value=pending.count())
        oldest = pending.aggregate(o=Min("created_at"))["o"]
        yield GaugeMetricFamily("forest_resume_lag_seconds",
                                "Age of the oldest unconsumed resume: how far resumes lag behind job reports.",
                                value=(now - oldest).total_seconds() if oldest else 0)

    def _processes(self, now):
        rows = process_liveness(now=now)
        live = GaugeMetricFamily("forest_process_live",
                                 "1 when some worker / runner consumed the liveness probe from its queue (beat: sent "
                                 "one) within FOREST_LIVENESS_WITHIN_S, else 0.", labels=["role"])
        age = GaugeMetricFamily("forest_process_last_seen_age_seconds",
                                "Seconds since the role's newest sign of life (-1: never).", labels=["role"])
        for row in rows:
            live.add_metric([row.role], 1 if row.verdict == "live" else 0)
            age.add_metric([row.role], -1 if row.age_s is None else row.age_s)
        yield live
        yield age


def forest_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForestCollector())
    return registry
