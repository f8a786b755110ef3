"""Writes for accelerators: serialised claims, release, usage accrual and budget enforcement.

Claims are serialised per Grove by locking that Grove's ``PlacementUnit`` rows (``SELECT ... FOR UPDATE``)
before counting the active claims on them, so two concurrent claims can never both take the last free
unit; with policy on, the team's entitlement row is locked next (always in that order: no deadlock),
which serialises the team's concurrency and budget checks across Groves.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Protocol

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.accelerators import hooks as accelerator_hooks
from apps.accelerators import rules, selectors
from apps.accelerators.models import AcceleratorClaim, AcceleratorEntitlement, AcceleratorUsage
from apps.accelerators.states import CLAIM
from apps.accelerators.vocabulary import BUDGET_EXHAUSTED, POLICY_FLAG, ClaimState
from apps.core.errors import Conflict, Forbidden, ValidationFailed
from apps.dispatch import hooks
from apps.dispatch.services import grove_job_cancel
from apps.flags.selectors import is_enabled
from apps.groves.models import AcceleratorInventoryItem, Grove, PlacementUnit

log = logging.getLogger(__name__)


class Requirement(Protocol):
    """What a claim reads of the work's requirement (an ``ExecutionRequirement`` from placement)."""

    @property
    def accelerators(self) -> rules.AcceleratorRequest | None: ...


def claim_transition(*, claim: AcceleratorClaim, to: str, reason: str, at: datetime) -> AcceleratorClaim:
    """The one way a claim changes state; an illegal transition raises."""
    CLAIM.apply(claim, to, reason=reason, now=at, changes={"end_reason": reason})
    accelerator_hooks.claims_changed(claim.grove_id)
    log.info("accelerator claim ended", extra={"job_ref": claim.job_ref, "state": to, "reason": reason})
    return claim


def accelerator_policy_check(*, team: str | None, admission: rules.Admission, count: int, now: datetime,
                             lock: bool = True) -> None:
    """Entitlement, concurrency and budget for an admitted request; raises ``not_entitled``,
    ``over_concurrency`` or ``over_budget``. A claim checks under the entitlement's row lock; the placement
    preview runs the very same check without it (``lock=False``)."""
    if not team:
        raise Forbidden("not_entitled", "Accelerator policy is on and this work names no team; run it for a team "
                                        "that holds an accelerator entitlement.")
    entitlements = selectors.entitlement_for(team=team, api=admission.api, vendor=admission.vendor)
    entitlement = (entitlements.select_for_update() if lock else entitlements).first()
    if entitlement is None:
        raise Forbidden("not_entitled", f"Team {team} holds no entitlement for {admission.api or admission.vendor} "
                                        "accelerators; ask an administrator for one.")
    if entitlement.max_concurrent is not None:
        in_use = selectors.active_count(entitlement)
        if in_use + count > entitlement.max_concurrent:
            raise Conflict("over_concurrency",
                           f"Team {team} already uses {in_use} of {entitlement.max_concurrent} concurrent "
                           f"{admission.api or 'accelerator'} slot(s); this work needs {count} more.",
                           extra={"in_use": in_use, "max_concurrent": entitlement.max_concurrent})
    if entitlement.budget_accelerator_seconds is not None:
        used = selectors.usage_seconds(entitlement, now=now)
        if used >= entitlement.budget_accelerator_seconds:
            raise Conflict("over_budget",
                           f"Team {team} has used {used:.0f} of its {entitlement.budget_accelerator_seconds} "
                           f"accelerator-seconds this {entitlement.period}; wait for the next period or raise "
                           "the budget.",
                           extra={"used_s": round(used), "budget_s": entitlement.budget_accelerator_seconds})


def accelerator_claim(*, grove: Grove, requirement: Requirement, job_ref: str,
                      team: str | None = None) -> AcceleratorClaim | None:
    """Admit and claim the requirement's accelerators on one unit of ``grove`` for ``job_ref``.

    None when no accelerators are requested. Idempotent per job: a second call for a job that already
    holds an active claim returns that claim. Raises ``accelerator_unavailable`` (with every admission
    reason), and with ``host.accelerators.policy`` on also ``not_entitled``, ``over_concurrency``,
    ``over_budget``.
    """
    request = requirement.accelerators
    if request is None:
        return None
    if not job_ref or not job_ref.strip():
        raise ValidationFailed("field_blank", "An accelerator claim needs the job it is for.", field="job_ref")
    policy = is_enabled(POLICY_FLAG, team=team)
    now = timezone.now()
    with transaction.atomic():
        existing = AcceleratorClaim.objects.filter(job_ref=job_ref, state=ClaimState.ACTIVE).first()
        if existing is not None:
            return existing
        # The lock that serialises claims on this Grove: every claimer locks the same unit rows first.
        units = list(PlacementUnit.objects.select_for_update().filter(grove=grove).order_by("unit_id"))
        resources = getattr(requirement, "resources", None)
        if resources is not None:  # the devices come from a unit that also has the CPU and memory free
            units = [unit for unit in units if unit.cpu_milli_free >= resources.cpu_milli
                     and unit.memory_bytes_free >= resources.memory_bytes]
        devices = AcceleratorInventoryItem.objects.filter(grove=grove)
        claims = AcceleratorClaim.objects.filter(grove=grove, state=ClaimState.ACTIVE).only("unit_id", "allocations")
        admission = rules.admit(request, units=selectors.units_from_rows(units),
                                devices=selectors.devices_from_rows(devices),
                                claimed=selectors.claimed_counts(claims), grove=grove.slug)
        if not admission.admitted:
            reasons = [refusal.to_json() for refusal in admission.refusals]
            raise Conflict("accelerator_unavailable",
                           " ".join(refusal.message for refusal in admission.refusals),
                           extra={"reasons": reasons, "grove": grove.slug})
        if policy:
            accelerator_policy_check(team=team, admission=admission, count=request.count, now=now)
        claim = AcceleratorClaim.objects.create(
            grove=grove, grove_slug=grove.slug, unit_id=admission.unit_id, job_ref=job_ref, team=team or "",
            vendor=admission.vendor, api=admission.api, count=request.count,
            allocations=[{"inventory_id": inventory_id, "count": n} for inventory_id, n in admission.allocations],
            cooperative=admission.cooperative, started_at=now, accrued_through=now,
        )
        accelerator_hooks.claims_changed(grove.pk)
    log.info("accelerator claimed", extra={"job_ref": job_ref, "grove": grove.slug, "unit": claim.unit_id,
                                           "count": claim.count, "mode": admission.label, "team": team or ""})
    return claim


def _accrue(claim: AcceleratorClaim, *, until: datetime) -> int:
    """Move usage from ``accrued_through`` to ``until`` into the ledger; returns accelerator-ms added.

    The caller holds the claim's row lock, so concurrent or repeated runs add each second once.
    """
    if until <= claim.accrued_through:
        return 0
    added = 0
    for day, seconds in rules.split_by_day(claim.accrued_through, until):
        ms = round(seconds * 1000) * claim.count
        row, _ = AcceleratorUsage.objects.get_or_create(
            claim=claim, day=day, defaults={"team": claim.team, "api": claim.api, "vendor": claim.vendor})
        AcceleratorUsage.objects.filter(pk=row.pk).update(accelerator_ms=F("accelerator_ms") + ms)
        added += ms
    claim.accrued_through = until
    claim.save(update_fields=["accrued_through"])
    return added


def accelerator_release(*, job_ref: str) -> AcceleratorClaim | None:
    """End the job's active claim (its terminal state arrived) and accrue its last seconds. Idempotent."""
    now = timezone.now()
    with transaction.atomic():
        claim = AcceleratorClaim.objects.select_for_update().filter(job_ref=job_ref, state=ClaimState.ACTIVE).first()
        if claim is None:
            return None
        _accrue(claim, until=now)
        return claim_transition(claim=claim, to=ClaimState.RELEASED, reason="job_finished", at=now)


def release_on_job_end(event: hooks.JobEnded) -> None:
    """``dispatch.hooks`` handler: a job that ends releases its claim, in the same transaction. A claim the
    budget revoked first (and whose job it then cancelled) is no longer active, so nothing accrues twice."""
    if event.job.payload.get("accelerators"):
        accelerator_release(job_ref=str(event.job.id))


def _cancel_job(claim: AcceleratorClaim) -> str:
    """Cancel the revoked claim's Grove job; a job already finished or unknown does not stop the budget."""
    try:
        with transaction.atomic():
            cancelled = grove_job_cancel(job_id=claim.job_ref, reason=BUDGET_EXHAUSTED)
    except Exception as exc:
        log.warning("cancelling the job of a revoked claim failed",
                    extra={"job_ref": claim.job_ref, "error": getattr(exc, "code", type(exc).__name__)})
        return f"cancel_failed:{getattr(exc, 'code', type(exc).__name__)}"
    return "cancelled" if cancelled else "not_live"


def accelerator_budget_enforce(*, now: datetime) -> list[str]:
    """Revoke the active claims (and cancel the jobs) of every team over its budget; returns job refs."""
    revoked: list[str] = []
    for entitlement in AcceleratorEntitlement.objects.filter(budget_accelerator_seconds__isnull=False):
        if not is_enabled(POLICY_FLAG, team=entitlement.team):
            continue
        if selectors.usage_seconds(entitlement, now=now) < entitlement.budget_accelerator_seconds:
            continue
        scope = selectors.entitlement_scope(entitlement)
        for claim_id in AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE, **scope).values_list("pk", flat=True):
            with transaction.atomic():
                claim = (AcceleratorClaim.objects.select_for_update(skip_locked=True)
                         .filter(pk=claim_id, state=ClaimState.ACTIVE).first())
                if claim is None:
                    continue  # released meanwhile, or another run is handling it
                _accrue(claim, until=now)
                # Revoked before its job is cancelled: the job's end then finds no active claim to release.
                claim_transition(claim=claim, to=ClaimState.REVOKED, reason=BUDGET_EXHAUSTED, at=now)
                outcome = _cancel_job(claim)
                log.warning("accelerator budget exhausted; job cancelled",
                            extra={"team": entitlement.team, "job_ref": claim.job_ref, "outcome": outcome})
                revoked.append(claim.job_ref)
    return revoked


def accelerator_usage_accrue(*, now: datetime | None = None) -> dict:
    """The beat task's work: accrue every active claim up to now, then enforce budgets.

    Safe to run twice, late, or concurrently: each claim is accrued under its row lock from its own
    ``accrued_through``, so a second run finds nothing left to add.
    """
    now = now or timezone.now()
    added = 0
    for claim_id in AcceleratorClaim.objects.filter(state=ClaimState.ACTIVE, accrued_through__lt=now).values_list(
            "pk", flat=True):
        with transaction.atomic():
            claim = (AcceleratorClaim.objects.select_for_update(skip_locked=True)
                     .filter(pk=claim_id, state=ClaimState.ACTIVE).first())
            if claim is not None:
                added += _accrue(claim, until=now)
    revoked = accelerator_budget_enforce(now=now)
    return {"accrued_ms": added, "revoked": revoked}
