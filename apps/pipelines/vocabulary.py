"""The pipeline domain's vocabulary (docs/design.md §2) and the limits of a graph: one value each. Pure: stdlib only.
String values are stored and are API/wire contract."""
from __future__ import annotations

from enum import StrEnum

from apps.flags.registry import DETACHED_WAIT
from apps.groves.vocabulary import Role


class RunKind(StrEnum):
    BUILD = "build"
    DEPLOY = "deploy"
    COMPUTE = "compute"


class RunStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class NodeKind(StrEnum):
    EXEC = "exec"
    BUILD_IMAGE = "build_image"
    DEPLOY = "deploy"


class NodeRuntime(StrEnum):
    CONTAINER = "container"
    NATIVE = "native"


class NodeStatus(StrEnum):
    PENDING = "pending"  # waiting for its needs
    QUEUED = "queued"  # needs met; the exec driver has been asked to dispatch it
    WAITING = "waiting"  # could fit an eligible Grove, not now: in the admission queue (waiting_for_capacity)
    AWAITING = "awaiting"  # its Grove job is dispatched; waiting for the outcome
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"  # a need did not succeed


class WaitMode(StrEnum):
    DETACHED = "detached"  # the runner slot was released; resumed from the outbox
    IN_PLACE = "in_place"  # the runner holds its slot and polls the job


class Reuse(StrEnum):
    GRAPH_DEDUP = "graph_dedup"
    NEVER = "never"


class Task(StrEnum):
    """The pipeline Celery tasks' registered names: ``tasks.py`` registers its tasks under them and the services
    send by them, so the services never import the tasks module that calls them."""
    NODE_EXECUTE = "pipelines.node_execute"
    NODE_WAIT_IN_PLACE = "pipelines.node_wait_in_place"
    NODE_RESUME = "pipeline.node_resume"
    ADMISSION_WAKE = "pipelines.admission_wake"
    NODE_WAIT_EXPIRE = "pipelines.node_wait_expire"
    SWEEP = "pipelines.sweep"


class OutboxKind(StrEnum):
    NODE_RESUME = "pipeline.node_resume"


# The Grove role a run's nodes need by default.
RUN_KIND_FAMILY: dict[str, Role] = {RunKind.BUILD: Role.BUILD, RunKind.DEPLOY: Role.RUNTIME,
                                     RunKind.COMPUTE: Role.COMPUTE}

DETACHED_WAIT_FLAG = DETACHED_WAIT

MAX_NODES = 500
MAX_ARGV = 256
MAX_ARG = 8192
MAX_ENV = 256
MAX_INPUTS = 64
MAX_OUTPUTS = 64
MAX_DATA_PATH = 400
MAX_TIMEOUT_S = 7 * 24 * 3600

# Step retries: a node may run at most 1 + MAX_RETRIES attempts. Backoff before retry n (1-based) is
# min(delay_s * factor ** (n - 1), max_s); defaults fill what a node leaves out. A backoff is a Celery
# countdown, so it stays within the Redis broker's visibility timeout (1 h): a longer one would be
# redelivered while it waits.
MAX_RETRIES = 10
MAX_BACKOFF_S = 3600
MAX_BACKOFF_FACTOR = 10
DEFAULT_BACKOFF = {"delay_s": 10, "factor": 2, "max_s": 600}
