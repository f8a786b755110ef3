"""``TextChoices`` for workload models, derived from ``vocabulary``."""
from apps.core.choices import text_choices
from apps.workloads import vocabulary

GenerationState = text_choices(vocabulary.GenerationState)
SecretsMode = text_choices(vocabulary.SecretsMode, {"env": "Environment variables",
                                                    "file": "Files (0600, private directory)"})
ProbeResult = text_choices(vocabulary.ProbeResult)
