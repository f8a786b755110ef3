"""Enumerations of the pipeline domain (DESIGN.md §2). String values are stored and are API/wire contract."""
from django.db import models


class RunKind(models.TextChoices):
    BUILD = "build", "Build"
    DEPLOY = "deploy", "Deploy"
    COMPUTE = "compute", "Compute"


class RunStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class NodeKind(models.TextChoices):
    EXEC = "exec", "Exec"
    BUILD_IMAGE = "build_image", "Build image"
    DEPLOY = "deploy", "Deploy"


class NodeRuntime(models.TextChoices):
    CONTAINER = "container", "Container"
    NATIVE = "native", "Native"


class NodeStatus(models.TextChoices):
    PENDING = "pending", "Pending"  # waiting for its needs
    QUEUED = "queued", "Queued"  # needs met; the exec driver has been asked to dispatch it
    AWAITING = "awaiting", "Awaiting job"  # its Grove job is dispatched; waiting for the outcome
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"
    SKIPPED = "skipped", "Skipped"  # a need did not succeed


class WaitMode(models.TextChoices):
    DETACHED = "detached", "Detached"  # the runner slot was released; resumed from the outbox
    IN_PLACE = "in_place", "In place"  # the runner holds its slot and polls the job


class Reuse(models.TextChoices):
    GRAPH_DEDUP = "graph_dedup", "Graph dedup"
    NEVER = "never", "Never"


class Trust(models.TextChoices):
    TRUSTED = "trusted", "Trusted"
    UNTRUSTED = "untrusted", "Untrusted"


class Family(models.TextChoices):
    BUILD = "build", "Build"
    RUNTIME = "runtime", "Runtime"
    COMPUTE = "compute", "Compute"


class StorageKind(models.TextChoices):
    OCI_REGISTRY = "oci_registry", "OCI registry"
    NPM_REGISTRY = "npm_registry", "npm registry"
    CAS = "cas", "Content-addressed store"
    EVIDENCE = "evidence", "Evidence"


class JobStatus(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"  # on a Grove, not yet claimed
    CLAIMED = "claimed", "Claimed"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"


class OutboxKind(models.TextChoices):
    NODE_RESUME = "pipeline.node_resume", "pipeline.node_resume"
