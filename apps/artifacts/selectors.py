"""Reads for artifacts: the filtered list behind the API (scoped to the acting user's teams) and lineage —
a run's inputs and outputs, an artifact's producer and consumers, followed transitively to a bound."""
from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db.models import Q, QuerySet

from apps.accounts.selectors import visible
from apps.artifacts.models import Artifact, ArtifactUse
from apps.artifacts.vocabulary import MAX_LINEAGE_DEPTH, MAX_LINEAGE_ROWS, UseRole
from apps.core.errors import NotFound
from apps.groves.models import Grove


def readable(rows: QuerySet, user=None, *, team: str | None = None) -> QuerySet:
    """``rows`` (artifacts or lineage rows) that may be read — the one selector every reader goes through,
    whoever it is: a user reads their teams' rows (``accounts.selectors.visible``; a staff admin's: all);
    work of a ``team`` (a workload apply, a run's inputs, the generation writer) reads that team's rows
    only, even when a staff admin acts for it; both narrow together. Team-less rows (shared images, bundles
    staff recorded for everyone) are readable by all. Neither (Host's own bookkeeping): all."""
    if team is not None:
        rows = rows.filter(Q(team=team) | Q(team=""))
    if not getattr(user, "pk", None):
        return rows
    return rows.filter(Q(pk__in=visible(rows, user).values("pk")) | Q(team=""))


def artifact_list(user=None) -> QuerySet[Artifact]:
    """Every artifact a user may read (see ``readable``)."""
    return readable(Artifact.objects.select_related("uploaded_by").order_by("-created_at", "-id"), user)


def artifact_get(*, artifact_id, user=None) -> Artifact:
    artifact = artifact_list(user).filter(pk=artifact_id).first()
    if artifact is None:
        raise NotFound("artifact_not_found", f"No artifact {artifact_id} that your teams may read.")
    return artifact


def grove_by_id_or_slug(reference: str) -> Grove:
    """The destination Grove named by id or slug, or ``404 grove_not_found``."""
    try:
        grove = Grove.objects.filter(pk=uuid.UUID(str(reference))).first()
    except ValueError:
        grove = Grove.objects.filter(slug=reference).first()
    if grove is None:
        raise NotFound("grove_not_found", f"No Grove '{reference}'.", field="grove")
    return grove


# --- lineage -------------------------------------------------------------------------------------------

def _uses(user) -> QuerySet[ArtifactUse]:
    return readable(ArtifactUse.objects.select_related("artifact").order_by("created_at", "id"), user)


def artifact_summary(artifact: Artifact) -> dict:
    return {"id": artifact.pk, "digest": artifact.digest, "storage_kind": artifact.storage_kind,
            "reference": artifact.reference, "size": artifact.size, "platform": artifact.platform,
            "producing_run_id": artifact.producing_run_id, "producing_node": artifact.producing_node,
            "producing_name": artifact.producing_name}


def use_view(use: ArtifactUse) -> dict:
    return {"run_id": str(use.run_id), "node": use.node, "role": use.role, "name": use.name,
            "artifact": artifact_summary(use.artifact), "at": use.created_at.isoformat()}


def run_lineage(*, run_id, user=None) -> dict:
    """``{"run_id", "inputs": [...], "outputs": [...]}``: what each node of the run consumed and produced."""
    uses = list(_uses(user).filter(run_id=run_id)[:MAX_LINEAGE_ROWS])
    return {"run_id": str(run_id),
            "inputs": [use_view(use) for use in uses if use.role == UseRole.INPUT],
            "outputs": [use_view(use) for use in uses if use.role == UseRole.OUTPUT]}


def _step_filter(steps: Iterable[tuple[str, str]]) -> Q:
    query = Q(pk__in=[])
    for run_id, node in steps:
        query |= Q(run_id=run_id, node=node)
    return query


def artifact_lineage(*, artifact: Artifact, user=None, depth: int = MAX_LINEAGE_DEPTH) -> dict:
    """An artifact's producers and consumers, then transitively: upstream through each producing step's
    inputs to their producers, downstream through each consuming step's outputs to their consumers, at most
    ``depth`` hops each way and ``MAX_LINEAGE_ROWS`` rows (``truncated`` says when a bound cut it).

    ``edges`` are lineage rows (artifact, step, role); ``artifacts`` summarises every artifact they name;
    a step is ``run_id:node``."""
    depth = max(1, min(depth, MAX_LINEAGE_DEPTH))
    rows = _uses(user)
    seen: dict[int, ArtifactUse] = {}
    artifacts = {artifact.pk: artifact_summary(artifact)}
    full = deeper = False  # the row bound was reached; the depth bound left more behind

    def take(queryset) -> list[ArtifactUse]:
        nonlocal full
        room = MAX_LINEAGE_ROWS - len(seen)
        found = [use for use in queryset[:room + 1] if use.pk not in seen]
        if len(found) > room:
            full, found = True, found[:room]
        for use in found:
            seen[use.pk] = use
            artifacts.setdefault(use.artifact_id, artifact_summary(use.artifact))
        return found

    # Upstream: who produced it, what they consumed, who produced that ...; downstream the mirror image.
    for towards, step_role in ((UseRole.OUTPUT, UseRole.INPUT), (UseRole.INPUT, UseRole.OUTPUT)):
        frontier = {artifact.pk}
        for _hop in range(depth):
            if not frontier or full:
                break
            uses = take(rows.filter(artifact_id__in=frontier, role=towards))
            steps = {(str(use.run_id), use.node) for use in uses}
            if not steps:
                break
            frontier = {use.artifact_id for use in take(rows.filter(_step_filter(steps), role=step_role))}
        else:
            deeper = deeper or bool(frontier and rows.filter(artifact_id__in=frontier, role=towards).exists())
    own = [use for use in seen.values() if use.artifact_id == artifact.pk]
    return {
        "artifact": artifact_summary(artifact),
        "producers": [use_view(use) for use in own if use.role == UseRole.OUTPUT],
        "consumers": [use_view(use) for use in own if use.role == UseRole.INPUT],
        "edges": [{"artifact_id": use.artifact_id, "step": f"{use.run_id}:{use.node}", "role": use.role,
                   "name": use.name} for use in sorted(seen.values(), key=lambda u: u.pk)],
        "artifacts": sorted(artifacts.values(), key=lambda a: a["id"]),
        "depth": depth, "truncated": full or deeper,
    }
