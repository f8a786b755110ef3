"""Writes for native ingress: the edge's record of its routes (with an audit event when one appears or
goes) and one edge pass (derive, render, nginx -t, reload, report per route)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from forest_agent.errors import IngressRefused
from forest_agent.nginx import (
    EdgeRoute,
    EdgeSettings,
    NginxCommand,
    NginxConfigFiles,
    render_edge_header,
    render_edge_route,
)

from apps.accounts.choices import AuditVia
from apps.accounts.services import audit_record
from apps.groves import mesh
from apps.groves.services import mesh_policy
from apps.ingress import rules, selectors
from apps.ingress.models import IngressRoute
from apps.ingress.vocabulary import EDGE_ACTOR, RouteAction, RouteState

log = logging.getLogger(__name__)
EDGE_FILE = "forest-edge.conf"


def edge_settings() -> EdgeSettings:
    return EdgeSettings(
        http_listen=settings.FOREST_EDGE_HTTP_LISTEN, https_listen=settings.FOREST_EDGE_HTTPS_LISTEN,
        https_port=settings.FOREST_EDGE_HTTPS_PORT, hsts_max_age_s=settings.FOREST_EDGE_HSTS_MAX_AGE_S,
        client_max_body_size=settings.FOREST_EDGE_MAX_BODY,
        connect_timeout_s=settings.FOREST_EDGE_CONNECT_TIMEOUT_S,
        read_timeout_s=settings.FOREST_EDGE_READ_TIMEOUT_S, send_timeout_s=settings.FOREST_EDGE_SEND_TIMEOUT_S,
        proxy_bind=settings.FOREST_EDGE_PROXY_BIND or None)


def edge_files() -> NginxConfigFiles:
    command = NginxCommand(binary=settings.FOREST_EDGE_NGINX_BINARY,
                           main_config=Path(settings.FOREST_EDGE_NGINX_CONFIG) if settings.FOREST_EDGE_NGINX_CONFIG
                           else None,
                           prefix=Path(settings.FOREST_EDGE_NGINX_PREFIX) if settings.FOREST_EDGE_NGINX_PREFIX
                           else None)
    return NginxConfigFiles(Path(settings.FOREST_EDGE_CONF_DIR), command)


def _audit(action: RouteAction, route: IngressRoute) -> None:
    audit_record(actor=None, actor_label=EDGE_ACTOR, via=AuditVia.COMMAND, action=action,
                 target_type="ingress.route", target_id=route.hostname, team=route.team,
                 detail={"workload": route.workload_slug, "upstream": route.upstream,
                         "path_prefix": route.path_prefix, "state": route.state})


@transaction.atomic
def routes_sync(desired: list[rules.DesiredRoute]) -> list[IngressRoute]:
    """Make the route rows match ``desired``: a new route is ``pending`` (audit: appeared), a changed one
    goes back to ``pending``, a route no longer derived is deleted (audit: gone). Idempotent."""
    wanted = {route.hostname: route for route in desired}
    rows = {row.hostname: row for row in IngressRoute.objects.select_for_update()}
    now = timezone.now()
    for hostname, row in rows.items():
        if hostname not in wanted:
            row.delete()
            _audit(RouteAction.GONE, row)
            log.info("ingress route gone", extra={"hostname": hostname, "workload": row.workload_slug})
    kept = []
    for hostname, route in wanted.items():
        fields = {"path_prefix": route.path_prefix, "workload_slug": route.workload_slug, "team": route.team,
                  "environment": route.environment, "grove_id": route.grove_id,
                  "upstream_address": route.upstream_address, "upstream_port": route.upstream_port}
        row = rows.get(hostname)
        if row is None:
            row = IngressRoute.objects.create(hostname=hostname, state_changed_at=now, **fields)
            _audit(RouteAction.APPEARED, row)
            log.info("ingress route appeared", extra={"hostname": hostname, "workload": route.workload_slug})
        elif any(str(getattr(row, key)) != str(value) for key, value in fields.items()):
            for key, value in fields.items():
                setattr(row, key, value)
            row.state, row.state_changed_at = RouteState.PENDING, now
            row.save()
        kept.append(row)
    return kept


def edge_route(row: IngressRoute) -> EdgeRoute:
    cert, key = rules.certificate_paths(
        row.hostname, cert_template=settings.FOREST_EDGE_CERT_PATH, key_template=settings.FOREST_EDGE_KEY_PATH,
        wildcard_cert=settings.FOREST_EDGE_WILDCARD_CERT, wildcard_key=settings.FOREST_EDGE_WILDCARD_KEY)
    return EdgeRoute(hostname=row.hostname, path_prefix=row.path_prefix, upstream_address=row.upstream_address,
                     upstream_port=row.upstream_port, certificate=cert, certificate_key=key,
                     comment=f"workload {row.workload_slug}")


def upstream_refusals(rows: list[IngressRoute]) -> dict[str, str]:
    """The routes the edge refuses to render whatever the database says, by host name: an upstream the mesh
    policy refuses (outside the mesh, the edge's or Host's own address, a port out of bounds, not a strict
    IP literal), or an address two Groves share (the heartbeat refuses a second claimant; this holds if
    one slipped in anyway)."""
    policy = mesh_policy()
    groves_at: dict[str, set[str]] = {}
    for row in rows:
        groves_at.setdefault(str(row.upstream_address), set()).add(str(row.grove_id))
    refused = {}
    for row in rows:
        problem = mesh.upstream_refusal(row.upstream_address, row.upstream_port, policy)
        if problem is not None:
            refused[row.hostname] = f"upstream refused ({problem.code}): {problem.detail}"
        elif len(groves_at[str(row.upstream_address)]) > 1:
            refused[row.hostname] = (f"upstream refused (mesh_address_taken): {row.upstream_address} is reported by "
                                     "more than one Grove.")
    return refused


@dataclass(frozen=True)
class EdgePassResult:
    serving: list[str]
    failed: dict[str, str]


def edge_pass(*, files: NginxConfigFiles | None = None, edge: EdgeSettings | None = None) -> EdgePassResult:
    """One render of the edge: derive the routes, record them, render one nginx file (a header and one
    section per route), install it (nginx -t, reload; a refused route is isolated and the rest served,
    the previous file kept otherwise) and record each route's state with nginx's error."""
    files = files or edge_files()
    edge = edge or edge_settings()
    rows = routes_sync(selectors.routes_desired())
    sections: dict[str, str] = {}
    errors = upstream_refusals(rows)
    for row in rows:
        if row.hostname in errors:
            continue
        try:
            sections[row.hostname] = render_edge_route(edge_route(row), edge)
        except IngressRefused as exc:
            errors[row.hostname] = exc.message
    installed, refused = files.install_sections(files.conf_dir / EDGE_FILE, render_edge_header(edge), sections)
    errors.update(refused)
    _states_record(rows, installed, sections, errors)
    serving = sorted(name for name in sections if installed.get(name) == sections[name] and name not in errors)
    if errors:
        log.warning("edge routes refused", extra={"failed": errors})
    return EdgePassResult(serving=serving, failed=errors)


def _states_record(rows: list[IngressRoute], installed: dict[str, str], sections: dict[str, str],
                   errors: dict[str, str]) -> None:
    now = timezone.now()
    for row in rows:
        if row.hostname in errors:
            state, error = RouteState.FAILED, errors[row.hostname]
        elif installed.get(row.hostname) == sections.get(row.hostname):
            state, error = RouteState.SERVING, ""
        else:
            state, error = RouteState.PENDING, ""
        changed = state != row.state
        IngressRoute.objects.filter(pk=row.pk).update(
            state=state, last_error=error[:4000], rendered_at=now,
            **({"state_changed_at": now} if changed else {}))
