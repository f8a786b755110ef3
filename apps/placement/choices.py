"""Enumerations of placement. The string values are stored and appear in the API."""
from django.db import models


class SubjectType(models.TextChoices):
    PIPELINE_NODE = "pipeline_node", "Pipeline node"
    WORKLOAD_GENERATION = "workload_generation", "Workload generation"
    COMPUTE_STEP = "compute_step", "Compute step"


class Chooser(models.TextChoices):
    # The requirement (or the caller) named the Grove: compatibility is still checked.
    EXPLICIT = "explicit", "Explicit target"
    # Selection among fresh Groves holding the role, ranked by platform preference and capacity fit.
    SELECTION = "selection", "Selection"
    # Shadow mode: nothing compatible, so the old role-only choice was made and recorded as would-refuse.
    FALLBACK = "fallback", "Role-only fallback (shadow mode)"


COMPATIBILITY_FLAG = "host.deploy.forest_compatibility"
PERSISTED_FLAG = "host.deploy.persisted_placement"
