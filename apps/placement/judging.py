"""Per-Grove judging for the decision core (``decide.rank``): one sampled Grove's rule verdicts, its resource
fit, its free totals and its score total, and what is kept of them between decisions. Pure: no Django.

What depends only on a Grove's facts (rule checks, the fit on its reported free counts, its allocatable
totals) is kept per facts object: the snapshot replaces a Grove's facts whenever its row, units, ledger or
claims change, so an entry stands exactly while the facts it was computed from do. What moves with a
batch's assumed loads (free rows, claims, the spread group's count) is judged each time it is asked, or read
back from the batch's memo (``decide.Loads.memo``) while the Grove's load version stands.
"""
from __future__ import annotations

from collections.abc import Mapping

from apps.placement import admission, rules, scoring
from apps.placement.admission import FitState
from apps.placement.requirements import ExecutionRequirement

# Per-Grove results (rule checks, resource fits) kept while the Grove's facts (the same object) stand.
_CHECKED: dict[tuple, tuple[rules.GroveFacts, list[rules.Incompatibility]]] = {}
_FITS: dict[tuple, tuple[rules.GroveFacts, admission.Fit]] = {}
_CACHE_MAX = 50_000


def _per_facts(table: dict, key, facts: rules.GroveFacts, compute):
    """``compute(key, facts)``, kept in ``table`` under (key, slug) while ``facts`` is the Grove's."""
    hit = table.get((key, facts.slug))
    if hit is not None and hit[0] is facts:
        return hit[1]
    if len(table) >= _CACHE_MAX:
        table.clear()
    found = compute(key, facts)
    table[(key, facts.slug)] = (facts, found)
    return found


def checked(requirement: ExecutionRequirement, facts: rules.GroveFacts) -> list[rules.Incompatibility]:
    """``rules.check``, kept per Grove facts and per what the rules read (resources never change a verdict)."""
    key = (requirement.family, requirement.compatibility, requirement.trust)
    return _per_facts(_CHECKED, key, facts, lambda _key, grove: rules.check(requirement, grove))


def fit_on(needs: admission.Needs, facts: rules.GroveFacts, *, free=None,
           claimed: Mapping | None = None, spread: bool = False) -> admission.Fit:
    """``needs`` admitted on one unit of this Grove, from its facts; ``free`` (unit id, free CPU, free
    memory) and ``claimed`` replace the facts' own when a batch has assumed work on the Grove. ``spread``:
    the policy's unit choice (``admission.unit_for``)."""
    if needs.accelerators is None:
        # The common case, what ``admission.fit`` answers "now" with, without building its unit objects.
        rows = facts.unit_free if free is None else free
        if len(rows) == len(facts.unit_allocatable):  # the same units in the same order (``grove_facts``)
            unit = admission.unit_for(needs.cpu_milli, needs.memory_bytes, facts.unit_allocatable, rows,
                                      spread=spread)
            if unit is not None:
                return _NOW.get(unit) or _now_on(unit)
    if free is None and claimed is None:
        return _per_facts(_FITS, (needs, spread), facts, _fit_now)
    return admission.fit(needs, units=admission.units_of(facts, free=free), devices=facts.devices,
                         claimed=dict(facts.claimed) if claimed is None else claimed, grove=facts.slug, spread=spread)


def _fit_now(key: tuple[admission.Needs, bool], facts: rules.GroveFacts) -> admission.Fit:
    needs, spread = key
    return admission.fit(needs, units=admission.units_of(facts), devices=facts.devices, claimed=dict(facts.claimed),
                         grove=facts.slug, spread=spread)


_ALLOCATABLE: dict[str, tuple[rules.GroveFacts, int, int]] = {}


def _sums(facts: rules.GroveFacts, free) -> tuple[int, int, int, int]:
    """A Grove's allocatable and free CPU and memory totals (a unit over-placed counts as 0 free). The
    allocatable totals are fleet facts, kept per facts object; the free totals move with every placement
    and are summed each time (a Grove reports a handful of units)."""
    cpu_allocatable, memory_allocatable = _allocatable_of(facts)
    cpu_free = memory_free = 0
    for row in facts.unit_free if free is None else free:
        if row[1] > 0:
            cpu_free += row[1]
        if row[2] > 0:
            memory_free += row[2]
    return cpu_allocatable, cpu_free, memory_allocatable, memory_free


def _allocatable_of(facts: rules.GroveFacts) -> tuple[int, int]:
    """A Grove's allocatable CPU and memory totals: fleet facts, kept per facts object."""
    held = _ALLOCATABLE.get(facts.id)
    if held is None or held[0] is not facts:
        if len(_ALLOCATABLE) >= _CACHE_MAX:
            _ALLOCATABLE.clear()
        held = _ALLOCATABLE[facts.id] = (facts, sum(row[1] for row in facts.unit_allocatable),
                                         sum(row[2] for row in facts.unit_allocatable))
    return held[1], held[2]


_NOW: dict[str, admission.Fit] = {}


def _now_on(unit_id: str) -> admission.Fit:
    """``Fit(NOW, unit_id=…)``, one immutable object per unit (a batch judges the same units over and over)."""
    fit = _NOW.get(unit_id)
    if fit is None:
        if len(_NOW) >= _CACHE_MAX:
            _NOW.clear()
        fit = _NOW[unit_id] = admission.Fit(FitState.NOW, unit_id=unit_id)
    return fit


def judged(needs: admission.Needs, facts: rules.GroveFacts, free, claimed, group: int, platform_rank: int,
           policy: scoring.Policy) -> list:
    """One sampled Grove as ``decide.rank`` keeps it: [load version (set by the caller), its resource fit, its
    score's total and columns when it has room now (else None and None: the columns and total
    ``scoring.score_of`` would build, by the same functions), and its score and JSON (built when it is
    shown)]. The fit is ``fit_on``'s (the policy's unit: ``admission.unit_for``), the totals ``_sums``'s."""
    fit = fit_on(needs, facts, free=free, claimed=claimed, spread=policy.spreads_units)
    if not fit.now:
        return [0, fit, None, None, None]
    cpu_total, cpu_free, memory_total, memory_free = _sums(facts, free)
    cpu, memory = needs.cpu_milli, needs.memory_bytes
    columns = scoring.columns_of(cpu, memory, cpu_total, cpu_free, memory_total, memory_free, group,
                                 facts.preference, platform_rank)
    return [0, fit, scoring.total_from(policy, columns), columns, None]
