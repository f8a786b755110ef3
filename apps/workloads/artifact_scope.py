"""What native workloads reference in the CAS, told to apps.artifacts through its hooks (registered in
``WorkloadsConfig.ready``): a Grove may download the bundle of a generation placed on it that is not
superseded, and GC keeps every bundle a workload or a current generation names."""
from __future__ import annotations

from apps.workloads.choices import GenerationState
from apps.workloads.models import NativeWorkload, WorkloadGeneration


def _current_generations():
    return WorkloadGeneration.objects.exclude(state=GenerationState.SUPERSEDED)


def grove_reads_bundle(grove_id, digest: str) -> bool:
    return _current_generations().filter(grove_id=grove_id, spec__bundle__digest=digest).exists()


def bundles_referenced(digests: set[str]) -> set[str]:
    found = set(NativeWorkload.objects.filter(bundle__digest__in=digests).values_list("bundle__digest", flat=True))
    return found | set(_current_generations().filter(spec__bundle__digest__in=digests - found)
                       .values_list("spec__bundle__digest", flat=True))
