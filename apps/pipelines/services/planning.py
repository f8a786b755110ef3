"""Planning a run: node order, each node's requirement with the plan-time never-placeable check, and the
GRAPH_DEDUP seed decision."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from apps.core.errors import ValidationFailed
from apps.pipelines import rules
from apps.pipelines.models import PipelineNode
from apps.pipelines.vocabulary import NodeStatus
from apps.placement.services import placement_plan_check

log = logging.getLogger(__name__)


@dataclass
class PlannedNode:
    node: dict
    position: int
    digest: str
    requirement: dict
    warnings: list = field(default_factory=list)


def pipeline_plan(*, canonical: dict, run_kind: str, environment: str = "", team: str = "") -> list[PlannedNode]:
    """Order the nodes and derive each one's requirement, with the plan-time never-placeable check: with
    ``host.deploy.forest_compatibility`` on it raises ``never_placeable``; off, the reasons are kept on the
    node and logged as *would refuse*."""
    if run_kind not in rules.RUN_KINDS:
        raise ValidationFailed("invalid_choice", f"Run kind must be one of: {', '.join(rules.RUN_KINDS)}.",
                               field="kind")
    by_id = {n["id"]: n for n in canonical["nodes"]}
    digests = rules.node_digests(canonical)
    planned = []
    for position, node_id in enumerate(rules.topological_order(canonical)):
        node = by_id[node_id]
        try:
            requirement = rules.planned_requirement(node, run_kind=run_kind)
        except ValidationFailed as exc:
            exc.field = f"graph.nodes[{node_id}].{exc.field}" if exc.field else f"graph.nodes[{node_id}]"
            raise
        check = placement_plan_check(requirement=requirement, environment=environment or None, team=team or None)
        warnings = list(check.reasons) if check.never_placeable else []
        if warnings:
            log.warning("node would be refused at plan time: never placeable",
                        extra={"node": node_id, "reasons": warnings})
        planned.append(PlannedNode(node=node, position=position, digest=digests[node_id],
                                   requirement=requirement.to_json(), warnings=warnings))
    return planned


def dedup_source(node: dict, digest: str) -> tuple[PipelineNode | None, str]:
    """GRAPH_DEDUP, decided once at seed time: the earlier successful node to inherit from, and why."""
    exclusion = rules.dedup_exclusion(node)
    if exclusion:
        return None, f"excluded:{exclusion}"
    source = (PipelineNode.objects.filter(node_digest=digest, status=NodeStatus.SUCCEEDED)
              .select_related("run").order_by("-finished_at").first())
    if source is None:
        return None, "no_earlier_success"
    return source, "seeded"
