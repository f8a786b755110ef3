"""The accelerator domain's vocabulary and limits: one value each. Pure: stdlib only."""
from __future__ import annotations

from enum import StrEnum

from apps.flags.registry import ACCELERATOR_POLICY
from apps.groves.vocabulary import MAX_ACCELERATOR_COUNT, MAX_ACCELERATOR_MEMORY


class ClaimState(StrEnum):
    ACTIVE = "active"
    RELEASED = "released"  # the job reached a terminal state
    REVOKED = "revoked"  # policy ended it (budget exhausted); the job was cancelled


class Period(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


# Vendor -> the API a request for that vendor means (NVIDIA -> CUDA, Apple -> Metal).
VENDOR_APIS = {"nvidia": "cuda", "apple": "metal", "amd": "rocm", "intel": "oneapi"}
# A unified-memory Apple GPU is one cooperative device per machine: a request can only ever get one.
SINGLE_DEVICE_VENDORS = frozenset({"apple"})

POLICY_FLAG = ACCELERATOR_POLICY
# The code a budget revocation ends a claim (and cancels its job) with.
BUDGET_EXHAUSTED = "accelerator_budget_exhausted"

__all__ = ["MAX_ACCELERATOR_COUNT", "MAX_ACCELERATOR_MEMORY", "ClaimState", "Period"]
