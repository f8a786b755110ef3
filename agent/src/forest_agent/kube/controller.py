"""`forest-controller run`: the reconcile loop of a Kubernetes Grove, wired from its parts.

Threads (all stop on `stop_event`):
  heartbeat  Nodes + Pods -> capacity report, sent with version, change kinds and the log tail
  poll       re-lists what this Grove owns once (`Reconciler.recover`), then long-polls Host's `changes`:
             new jobs are rendered, validated and tracked, cancellations decided and their Job deleted
  watch      Pods (cluster-wide), Jobs and Deployments (each work namespace) carrying this Grove's
             labels; each event queues its job id (watch.py), and a resync queues every tracked job
  worker     takes one job id at a time from the work queue (workqueue.py) and runs the step of its
             state (reconcile.py, states in job_states.py) until it waits on Kubernetes or Host

Nothing is lost on a crash: the cluster is the journal. Names derive from job id + attempt, so
re-applying never makes a second Job; a terminal report is retried with backoff until Host answers and
only then is the object marked `forest.dev/reported: <job id>`, which the re-list skips: Host down and
back, or the controller restarted, gets each report once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from forest_agent import __version__
from forest_agent.backoff import Backoff
from forest_agent.kube import inventory
from forest_agent.kube.cluster import Cluster, ClusterError
from forest_agent.kube.config import ControllerConfig, owner_selector
from forest_agent.kube.reconcile import Reconciler
from forest_agent.kube.render import RenderConfig
from forest_agent.kube.spec import CHANGE_KINDS
from forest_agent.kube.tracked import TrackedJobs
from forest_agent.kube.watch import Watcher
from forest_agent.kube.workqueue import WorkQueue
from forest_agent.logring import LogRing, Redactor
from forest_agent.wire.client import WireClient
from forest_agent.wire.loops import HostLoops
from forest_agent.wire.messages import Changes

__all__ = ["VERSION", "Controller", "ControllerConfig"]

log = logging.getLogger(__name__)

VERSION = f"forest-controller {__version__}"
_HEARTBEAT_LOG_LINES = 50


def _always() -> bool:
    return True


class Controller(HostLoops):
    runner_name = "controller"
    config: ControllerConfig

    def __init__(
        self,
        *,
        wire: WireClient,
        cluster: Cluster,
        grove_id: str,
        config: ControllerConfig | None = None,
        ring: LogRing | None = None,
        stop_event: threading.Event | None = None,
        may_act: Callable[[], bool] | None = None,
    ) -> None:
        """`stop_event`: one stop for signals and for a lost lease. `may_act`: leader election's gate
        (kube/leader.py), checked before every claim, apply, report and delete."""
        self.wire = wire
        self.cluster = cluster
        self.grove_id = grove_id
        self.config = config or ControllerConfig()
        self.ring = ring or LogRing(500, Redactor())
        self.stop_event = stop_event or threading.Event()
        self._may_act = may_act or _always
        self.fatal: str | None = None
        self.last_capacity: dict[str, Any] = {"placement_units": [], "accelerators": []}
        self.recovered = threading.Event()
        selector = owner_selector(grove_id)
        self.tracked = TrackedJobs()
        self.queue = WorkQueue(self.stop_event)
        self.reconciler = Reconciler(
            wire=wire,
            cluster=cluster,
            config=self.config,
            render_config=RenderConfig(
                grove_id=grove_id,
                namespace=self.config.namespace,
                untrusted_namespace=self.config.untrusted_namespace,
                runtime_class=self.config.runtime_class,
                gpu_taint_keys=self.config.gpu_taint_keys,
                data_image=self.config.data_image,
                data_command=self.config.data_command,
                data_url=getattr(wire, "base_url", ""),
            ),
            selector=selector,
            tracked=self.tracked,
            queue=self.queue,
            redactor=self.ring.redactor,
            may_act=self._may_act,
        )
        self.watcher = Watcher(
            cluster=cluster,
            config=self.config,
            selector=selector,
            tracked=self.tracked,
            queue=self.queue,
            stop=self.stop_event,
        )

    @property
    def may_act(self) -> Callable[[], bool]:
        """Read-only: the reconciler holds the same gate, so it is given once, to the constructor."""
        return self._may_act

    # -- loops (HostLoops) ------------------------------------------------------------------------
    def heartbeat_body(self) -> dict[str, Any]:
        try:
            nodes, _ = self.cluster.list("Node")
            pods, _ = self.cluster.list("Pod")
            self.last_capacity = inventory.capacity(nodes, pods)
            self.reconciler.models = inventory.models_by_inventory_id(self.last_capacity)
        except ClusterError as exc:
            log.warning(
                "cannot read Nodes/Pods for the capacity report (%s); sending the last one", exc.message
            )
        return {
            "version": VERSION,
            "change_kinds": list(CHANGE_KINDS),
            "isolation": ["container"],
            "capacity": self.last_capacity,
            "log_tail": self.ring.tail(_HEARTBEAT_LOG_LINES),
        }

    def before_polling(self) -> None:
        self.recovered.wait()

    def apply_changes(self, changes: Changes) -> None:
        if not self._may_act():
            return  # Host offers them again to whoever leads
        for job_id in changes.cancel:
            self._guarded(self.reconciler.cancel, job_id)
        for raw in changes.jobs:
            self._guarded(self.reconciler.start_job, raw)

    @staticmethod
    def _guarded(func: Callable[[Any], None], arg: Any) -> None:
        try:
            func(arg)
        except ClusterError as exc:
            # Nothing was claimed; Host offers the job (or the cancellation) again on the next poll.
            log.warning("Kubernetes API error (%s); Host will offer it again", exc.message)

    def _recover_then_poll(self) -> None:
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while not self.stop_event.is_set() and not self.recovered.is_set():
            try:
                self.reconciler.recover()
            except ClusterError as exc:
                delay = backoff.next_delay()
                log.warning("cannot re-list owned objects (%s); retrying in %.1fs", exc.message, delay)
                self.stop_event.wait(delay)
            else:
                self.recovered.set()
        self._poll_loop()

    # -- threads ----------------------------------------------------------------------------------
    def start(self) -> list[threading.Thread]:
        log.info("%s running as Grove %s against %s", VERSION, self.grove_id, self.wire.base_url)
        threads = [
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True),
            threading.Thread(target=self._recover_then_poll, name="poll", daemon=True),
            threading.Thread(target=self.watcher.resync, name="resync", daemon=True),
        ]
        threads += [
            threading.Thread(target=self.reconciler.work, name=f"worker-{n}", daemon=True)
            for n in range(max(1, self.config.workers))
        ]
        threads += [
            threading.Thread(
                target=self.watcher.watch, args=(kind, ns), name=f"watch-{kind}-{ns or 'all'}", daemon=True
            )
            for kind, ns in self.watcher.scopes()
        ]
        for thread in threads:
            thread.start()
        return threads

    def run(self) -> int:
        """Run until `stop_event` is set (signal) or Host refuses us; return the exit code."""
        threads = self.start()
        self.stop_event.wait()
        self.shutdown(threads)
        if self.fatal:
            log.error("%s", self.fatal)
            return 3
        return 0

    def shutdown(self, threads: list[threading.Thread], timeout_s: float = 5.0) -> None:
        self.stop_event.set()
        self.queue.wake_all()
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            if not thread.name.startswith("watch-"):  # a watch ends with its server timeout
                thread.join(max(0.0, deadline - time.monotonic()))
        self.wire.close()
