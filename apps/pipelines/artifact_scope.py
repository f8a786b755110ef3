"""What pipeline work references in the CAS, told to apps.artifacts through its hooks (registered in
``PipelinesConfig.ready``): a Grove may download the ``cas`` inputs of its live jobs' nodes and write
outputs only for a node whose job it has claimed; GC keeps the inputs of every unfinished node."""
from __future__ import annotations

from apps.artifacts.vocabulary import StorageKind
from apps.dispatch.models import GroveJob
from apps.dispatch.states import JOB_LIVE
from apps.dispatch.vocabulary import JobStatus
from apps.pipelines.models import PipelineNode
from apps.pipelines.states import NODE_TERMINAL


def _cas_inputs(spec: dict) -> set[str]:
    return {item["digest"] for item in (spec or {}).get("inputs", []) if item.get("storage_kind") == StorageKind.CAS}


def grove_reads_input(grove_id, digest: str) -> bool:
    specs = (PipelineNode.objects.filter(current_job__grove_id=grove_id, current_job__status__in=JOB_LIVE)
             .values_list("spec", flat=True))
    return any(digest in _cas_inputs(spec) for spec in specs)


def grove_writes_output(grove_id, run_id: str, node_id: str) -> str | None:
    """The run's team when this Grove has claimed the node's current job (and it is still live), else None."""
    return (PipelineNode.objects.filter(run_id=run_id, node_id=node_id, current_job__grove_id=grove_id,
                                        current_job__status__in=(JobStatus.CLAIMED, JobStatus.RUNNING))
            .values_list("run__team", flat=True).first())


def grove_job_live(grove_id, job_id: str) -> bool:
    """A job data token's job is still claimed or running on its Grove (a token dies with its job)."""
    return GroveJob.objects.filter(pk=job_id, grove_id=grove_id,
                                   status__in=(JobStatus.CLAIMED, JobStatus.RUNNING)).exists()


def inputs_referenced(digests: set[str]) -> set[str]:
    specs = PipelineNode.objects.exclude(status__in=NODE_TERMINAL).values_list("spec", flat=True)
    found: set[str] = set()
    for spec in specs.iterator():
        found |= _cas_inputs(spec) & digests
    return found
