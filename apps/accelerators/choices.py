"""``TextChoices`` for accelerator models, derived from ``vocabulary``."""
from apps.accelerators import vocabulary
from apps.accelerators.vocabulary import BUDGET_EXHAUSTED, POLICY_FLAG
from apps.core.choices import text_choices

ClaimState = text_choices(vocabulary.ClaimState)
Period = text_choices(vocabulary.Period, {"day": "Day (UTC)", "week": "Week (UTC, from Monday)",
                                          "month": "Calendar month (UTC)"})

__all__ = ["BUDGET_EXHAUSTED", "POLICY_FLAG", "ClaimState", "Period"]
