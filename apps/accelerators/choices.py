"""Enumerations of accelerator admission and policy."""
from django.db import models


class ClaimState(models.TextChoices):
    ACTIVE = "active", "Active"
    RELEASED = "released", "Released"  # the job reached a terminal state
    REVOKED = "revoked", "Revoked"  # policy ended it (budget exhausted); the job was cancelled


# The one state machine of a claim: only an active claim ends, and it ends once.
CLAIM_TRANSITIONS = {
    ClaimState.ACTIVE: {ClaimState.RELEASED, ClaimState.REVOKED},
    ClaimState.RELEASED: set(),
    ClaimState.REVOKED: set(),
}


class Period(models.TextChoices):
    DAY = "day", "Day (UTC)"
    WEEK = "week", "Week (UTC, from Monday)"
    MONTH = "month", "Calendar month (UTC)"


POLICY_FLAG = "host.accelerators.policy"
BUDGET_EXHAUSTED = "accelerator_budget_exhausted"
