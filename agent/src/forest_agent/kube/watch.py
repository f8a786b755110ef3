"""How the controller hears that a tracked job changed: list + watch per kind, and a periodic resync.

Each watch lists the kind's objects carrying this Grove's labels, then watches from that list's
resourceVersion (server `timeoutSeconds`, resumed from the last version seen, re-listed on 410 Gone or
after an error with backoff). Every object whose job id is tracked queues that id; the work queue
coalesces, so a burst of events is one reconcile. The resync queues every tracked job now and then,
whatever the watches said, so a missed event heals.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from forest_agent.backoff import Backoff
from forest_agent.kube import names
from forest_agent.kube.cluster import Cluster, ClusterError
from forest_agent.kube.config import ControllerConfig
from forest_agent.kube.tracked import TrackedJobs
from forest_agent.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)


class Watcher:
    def __init__(
        self,
        *,
        cluster: Cluster,
        config: ControllerConfig,
        selector: str,
        tracked: TrackedJobs,
        queue: WorkQueue,
        stop: threading.Event,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.selector = selector
        self.tracked = tracked
        self.queue = queue
        self.stop = stop

    def scopes(self) -> list[tuple[str, str | None]]:
        """(kind, namespace) of each watch: Pods cluster-wide (read-only, the capacity report reads them
        anyway), Jobs and Deployments only in the work namespaces (what a namespaced Role allows)."""
        return [("Pod", None), *self.config.owned_scopes]

    def watch(self, kind: str, namespace: str | None = None) -> None:
        """A watch thread's body: list, then watch, until the stop event is set."""
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop.is_set():
            try:
                items, version = self.cluster.list(kind, label_selector=self.selector, namespace=namespace)
                for obj in items:
                    self._queue_owned(obj)
                while not self.stop.is_set():
                    for _, obj in self.cluster.watch(
                        kind,
                        label_selector=self.selector,
                        resource_version=version,
                        timeout_s=self.config.watch_timeout_s,
                        stopper=self.stop.is_set,
                        namespace=namespace,
                    ):
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        self._queue_owned(obj)
                backoff.reset()
            except ClusterError as exc:
                if exc.gone:
                    log.info("watch %s: history expired; re-listing", kind)
                    continue
                delay = backoff.next_delay()
                log.warning("watch %s failed (%s); re-listing in %.1fs", kind, exc.message, delay)
                self.stop.wait(delay)

    def resync(self) -> None:
        """The resync thread's body: queue every tracked job every `resync_s`."""
        while not self.stop.wait(self.config.resync_s):
            for job_id in self.tracked.ids():
                self.queue.add(job_id)

    def _queue_owned(self, obj: dict[str, Any]) -> None:
        job_id = ((obj.get("metadata") or {}).get("labels") or {}).get(names.LABEL_JOB_ID)
        if job_id and job_id in self.tracked:
            self.queue.add(job_id)
