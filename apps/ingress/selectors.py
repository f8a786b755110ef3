"""Reads for native ingress: the routes the edge should serve now, and the routes as the edge reported
them, scoped to what the acting user may see."""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from apps.accounts.selectors import visible
from apps.flags.selectors import is_enabled
from apps.ingress import rules
from apps.ingress.models import IngressRoute
from apps.ingress.vocabulary import NATIVE_INGRESS_FLAG
from apps.workloads.models import IngressHostname, WorkloadGeneration
from apps.workloads.vocabulary import GenerationState


def routes_desired() -> list[rules.DesiredRoute]:
    """Every route the edge should serve: one per host name of a *live* generation on a *fresh* Grove
    that reports its mesh address and proxy port, whose workload holds the name, where
    ``host.deploy.native_ingress`` is on for the workload's environment and team. Three queries."""
    cutoff = timezone.now() - timedelta(seconds=settings.GROVE_STALE_AFTER_S)
    live = (WorkloadGeneration.objects.filter(state=GenerationState.LIVE, grove__last_heartbeat_at__gte=cutoff,
                                              grove__mesh_address__isnull=False,
                                              grove__mesh_proxy_port__isnull=False)
            .select_related("workload", "grove").order_by("workload_id", "-number"))
    claims: dict[int, list[str]] = {}
    for hostname, workload_id in IngressHostname.objects.values_list("hostname", "workload_id"):
        claims.setdefault(workload_id, []).append(hostname)
    routes: list[rules.DesiredRoute] = []
    seen_workloads: set[int] = set()
    for generation in live:
        workload = generation.workload
        if workload.pk in seen_workloads:  # the newest live generation answers for its workload
            continue
        seen_workloads.add(workload.pk)
        if not is_enabled(NATIVE_INGRESS_FLAG, environment=workload.environment, team=workload.team or None):
            continue
        grove = generation.grove
        routes += rules.generation_routes(
            spec_ingress=generation.spec.get("ingress"), claimed=claims.get(workload.pk, ()),
            workload_slug=workload.slug, team=workload.team, environment=workload.environment,
            grove_id=str(grove.pk), mesh_address=grove.mesh_address, mesh_proxy_port=grove.mesh_proxy_port)
    return routes


def ingress_status() -> dict:
    """Whether ingress is on (the flag's global value) and, when off, why nothing is rendered."""
    enabled = is_enabled(NATIVE_INGRESS_FLAG)
    reason = "" if enabled else (f"{NATIVE_INGRESS_FLAG} is off: the edge renders no route (turn it on in "
                                 "admin or with `manage.py flags set`).")
    return {"enabled": enabled, "reason": reason}


def routes_visible(user) -> QuerySet[IngressRoute]:
    """The routes ``user`` may see (their teams' workloads; every route for a staff admin)."""
    return visible(IngressRoute.objects.select_related("grove"), user)
