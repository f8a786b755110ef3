"""Step data at submit: every node's declared inputs resolved to exact artifacts (before the graph is
digested, so GRAPH_DEDUP and retries see the digests), and the lineage rows that say which run's node
used which artifact as an input."""
from __future__ import annotations

from apps.artifacts.selectors import grove_by_id_or_slug
from apps.artifacts.services import artifact_input_resolve, artifact_uses_record
from apps.artifacts.vocabulary import StorageKind, UseRole
from apps.core.errors import NotFound
from apps.pipelines.models import PipelineRun


def _platforms(node: dict) -> list[str]:
    """The platforms an input must serve: the pinned Grove's, in its reported order (an OCI index is
    resolved in that order); an unpinned step's own ``platform`` list; else none (the index fallback)."""
    if node.get("grove"):
        try:
            return list(grove_by_id_or_slug(node["grove"]).platforms or [])
        except NotFound:
            return []  # the pin itself is refused, with its own code, when the run is seeded
    return list(node.get("platform") or [])


def graph_inputs_resolve(*, canonical: dict, user=None, team: str = "",
                         node_fields: dict[str, str] | None = None) -> dict:
    """``canonical`` with each node's ``inputs`` replaced by their resolutions (in place; returned).
    ``node_fields`` maps a node id to the field path its caller knows it by (a compute step's
    ``steps[2]``); a refusal names the input there."""
    for node in canonical["nodes"]:
        prefix = (node_fields or {}).get(node["id"], f"graph.nodes[{node['id']}]")
        platforms = _platforms(node)
        if isinstance(node.get("image"), dict):
            # A container step's own image given as an artifact: it must be an image that runs here; the
            # step then names it pinned by digest (and its lineage shows it as the input "image").
            node["image_artifact"] = artifact_input_resolve(
                item={"artifact": node["image"]["artifact"], "kind": StorageKind.OCI_REGISTRY, "name": "image"},
                field=f"{prefix}.image", platforms=platforms, user=user, team=team)
            node["image"] = node["image_artifact"]["reference"]
        if not node.get("inputs"):
            continue
        node["inputs"] = [
            artifact_input_resolve(item=item, field=f"{prefix}.inputs[{index}]", platforms=platforms, user=user,
                                   team=team)
            for index, item in enumerate(node["inputs"])]
    return canonical


def run_inputs_record(*, run: PipelineRun, canonical: dict) -> None:
    """One ``input`` lineage row per resolved input of every node of the run."""
    for node in canonical["nodes"]:
        items = [*node.get("inputs", []), *([node["image_artifact"]] if node.get("image_artifact") else [])]
        uses = [(item["artifact_id"], item["name"]) for item in items if "artifact_id" in item]
        if uses:
            artifact_uses_record(run_id=run.id, node=node["id"], role=UseRole.INPUT, uses=uses, team=run.team)
