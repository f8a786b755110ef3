"""``TextChoices`` for placement models, derived from ``vocabulary`` (the values are written there)."""
from apps.core.choices import text_choices
from apps.placement import vocabulary
from apps.placement.vocabulary import COMPATIBILITY_FLAG, PERSISTED_FLAG

SubjectType = text_choices(vocabulary.SubjectType)
Outcome = text_choices(vocabulary.Outcome)
Chooser = text_choices(vocabulary.Chooser, {"explicit": "Explicit target",
                                            "fallback": "Role-only fallback (shadow mode)"})

__all__ = ["COMPATIBILITY_FLAG", "PERSISTED_FLAG", "Chooser", "Outcome", "SubjectType"]
