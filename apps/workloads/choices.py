from django.db import models


class GenerationState(models.TextChoices):
    PENDING = "pending", "Pending"
    STARTING = "starting", "Starting"
    LIVE = "live", "Live"
    CRASH_LOOP = "crash_loop", "Crash loop"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"
    SUPERSEDED = "superseded", "Superseded"


class SecretsMode(models.TextChoices):
    ENV = "env", "Environment variables"
    FILE = "file", "Files (0600, private directory)"


class ProbeResult(models.TextChoices):
    PASSING = "passing", "Passing"
    FAILING = "failing", "Failing"
    UNKNOWN = "unknown", "Unknown"
