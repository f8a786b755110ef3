"""What workloads subscribes to below it (called by ``WorkloadsConfig.ready``; listed in docs/architecture.md)."""
from __future__ import annotations


def connect() -> None:
    from apps.artifacts import hooks as artifact_hooks
    from apps.dispatch import hooks as dispatch_hooks
    from apps.workloads import artifact_scope, selectors

    dispatch_hooks.register_changes_source("workloads", selectors.grove_workloads)
    artifact_hooks.register_grove_reader(artifact_scope.grove_reads_bundle)
    artifact_hooks.register_referencer(artifact_scope.bundles_referenced)
