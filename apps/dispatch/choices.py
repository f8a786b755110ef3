"""``TextChoices`` for dispatch models, derived from ``vocabulary``."""
from apps.core.choices import text_choices
from apps.dispatch import vocabulary

JobStatus = text_choices(vocabulary.JobStatus)
