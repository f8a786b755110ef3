"""The compatibility checker (docs/design.md §2) and the platform position the chooser scores. Pure: no Django.

Each rule is a small ``Rule``: its check ``(requirement, grove) -> list[Incompatibility]`` and, beside
it, the index key the fleet snapshot files a Grove under for it. ``check`` runs all of them and returns
*every* incompatibility, never just the first, in a fixed order (the order of ``RULES``, then by code)
so the result does not depend on list order in the inputs. Accelerators are
deliberately not here: admission and policy are separate steps with their own codes
(``apps.accelerators``).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from apps.groves.vocabulary import MAX_PLATFORMS as MAX_GROVE_PLATFORMS
from apps.groves.vocabulary import IsolationMode, Substrate
from apps.placement.requirements import ExecutionRequirement, substrate_for_change_kind
from apps.placement.scoring import PREFERENCE_DEFAULT
from apps.placement.vocabulary import Trust

# A Grove reports at most MAX_GROVE_PLATFORMS platforms; the ranking looks no further.
NO_PLATFORM_RANK = 1000


@dataclass(frozen=True, slots=True)
class GroveFacts:
    """Everything placement reads of a Grove, as plain data: the one description from the fleet snapshot
    to the verdict (``apps.placement.snapshot.grove_facts`` builds it from rows or a model instance).

    ``units`` keeps only the (free CPU milli, free memory bytes) pairs no other unit of the Grove dominates:
    enough to answer "does some unit fit both". ``accelerator_units`` and ``devices`` are as reported
    (``apps.accelerators.rules.Unit`` / ``Device``), for accelerator admission; ``claimed`` holds Host's own
    active accelerator claims on them ((unit id, inventory id), count), kept current by the snapshot on
    every claim and release. ``unit_free`` is each unit's (id, free CPU milli, free memory bytes) after the
    placements Host has made on it since the Grove last reported free counts (the assume ledger,
    ``apps.placement.batch``): what a batch may still hand out; ``unit_allocatable`` the same units' (id,
    allocatable CPU milli, allocatable memory bytes), which resource admission reads for "never fits"
    (``apps.placement.admission.units_of`` joins the two).
    """

    id: str
    slug: str
    substrate: str
    roles: tuple[str, ...]
    platforms: tuple[str, ...]  # preference order
    isolation_modes: tuple[str, ...]
    change_kinds: tuple[str, ...]
    enabled: bool = True
    last_heartbeat_at: datetime | None = None
    units: tuple[tuple[int, int], ...] = ()
    apis: frozenset[str] = frozenset()  # accelerator APIs, for the ranking's API preference
    # Typed loosely on purpose: the pure rules import nothing from apps.accelerators (an upper app).
    accelerator_units: tuple[Any, ...] = ()
    devices: tuple[Any, ...] = ()
    claimed: tuple[tuple[tuple[str, str], int], ...] = ()
    unit_free: tuple[tuple[str, int, int], ...] = ()
    unit_allocatable: tuple[tuple[str, int, int], ...] = ()
    # Readiness apart from liveness (docs/decisions.md "Grove readiness"): the Grove polled ``changes`` or
    # claimed within ``GROVE_READY_WITHIN_S`` when these facts were built; the snapshot files it again as
    # unready once that poll grows too old (``fleet.FleetIndex.unready``). A heartbeat alone never sets it.
    ready: bool = True
    last_polled_at: datetime | None = None
    # The operator's preference for this Grove (0..100; staff set it in admin), read by a score plugin.
    preference: int = PREFERENCE_DEFAULT

    @property
    def heartbeat(self) -> float | None:
        return None if self.last_heartbeat_at is None else self.last_heartbeat_at.timestamp()

    def stale(self, cutoff: float) -> bool:
        """Whether the last heartbeat is before ``cutoff`` (a timestamp), or never came."""
        return self.last_heartbeat_at is None or self.last_heartbeat_at.timestamp() < cutoff

    def fits(self, cpu_milli: int, memory_bytes: int) -> bool:
        """Some unit has this much CPU and memory free at once."""
        for cpu, memory in self.units:  # noqa: SIM110 - a loop, not any(): called for every Grove a decision walks
            if cpu >= cpu_milli and memory >= memory_bytes:
                return True
        return False


def frontier(units: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The (free CPU, free memory) pairs not dominated on both (most CPU first)."""
    kept: list[tuple[int, int]] = []
    for cpu, memory in sorted(units, key=lambda unit: (-unit[0], -unit[1])):
        if not kept or memory > kept[-1][1]:
            kept.append((cpu, memory))
    return tuple(kept)


@dataclass(frozen=True, order=True)
class Incompatibility:
    code: str
    message: str
    grove: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "grove": self.grove}


@dataclass(frozen=True, slots=True)
class Rule:
    """One compatibility rule: its check, and the index key it declares beside it.

    ``keys(facts)`` are the values the fleet snapshot indexes a Grove under for this rule;
    ``accepts(req)`` are the values a requirement accepts (``None``: the rule does not constrain it).
    Invariant (tested): ``check(req, facts) == []`` exactly when ``accepts(req)`` is None or shares a
    value with ``keys(facts)``. The snapshot builds its eligibility indexes and cache keys from
    ``RULES`` alone, so a rule added here is honoured there with no other edit.
    """

    name: str
    codes: tuple[str, ...]  # the codes ``check`` can return, in report order
    check: Callable[[ExecutionRequirement, GroveFacts], list[Incompatibility]]
    keys: Callable[[GroveFacts], Iterable[Hashable]]
    accepts: Callable[[ExecutionRequirement], Iterable[Hashable] | None]


def _role(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    if req.family in grove.roles:
        return []
    held = ", ".join(sorted(grove.roles)) or "no role"
    return [Incompatibility("role_missing", f"Grove {grove.slug} holds {held}, not the {req.family} role this "
                            "work needs.", grove.slug)]


ROLE = Rule("role", ("role_missing",), check=_role, keys=lambda grove: grove.roles,
            accepts=lambda req: (req.family,))


def _platform(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    allowed = req.compatibility.platform.allowed
    if not allowed or set(allowed) & set(grove.platforms):
        return []
    sources = ", ".join(req.compatibility.platform.sources)
    return [Incompatibility(
        "platform_mismatch",
        f"The work runs on {', '.join(sorted(allowed))} (from {sources}); Grove {grove.slug} reports "
        f"{', '.join(sorted(grove.platforms)) or 'no platform'}.", grove.slug)]


PLATFORM = Rule("platform", ("platform_mismatch",), check=_platform, keys=lambda grove: grove.platforms,
                accepts=lambda req: req.compatibility.platform.allowed or None)


def _substrate(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    needed = substrate_for_change_kind(req.compatibility.change_kind)
    if needed is None or needed == grove.substrate:
        return []
    return [Incompatibility(
        "substrate_mismatch",
        f"A {req.compatibility.change_kind} change needs a {needed} Grove; {grove.slug} is {grove.substrate}.",
        grove.slug)]


def _substrate_accepts(req: ExecutionRequirement) -> tuple[str, ...] | None:
    needed = substrate_for_change_kind(req.compatibility.change_kind)
    return None if needed is None else (needed,)


SUBSTRATE = Rule("substrate", ("substrate_mismatch",), check=_substrate, keys=lambda grove: (grove.substrate,),
                 accepts=_substrate_accepts)


def _isolation(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    isolation = req.compatibility.isolation
    found = []
    if isolation == IsolationMode.HOST_PROCESS and grove.substrate != Substrate.NATIVE:
        found.append(Incompatibility(
            "host_process_needs_native",
            f"Host-process isolation exists only on native Groves; {grove.slug} is {grove.substrate}.", grove.slug))
    elif isolation not in grove.isolation_modes:
        offered = ", ".join(sorted(grove.isolation_modes)) or "none"
        found.append(Incompatibility(
            "isolation_unavailable",
            f"The work needs {isolation} isolation; Grove {grove.slug} offers {offered}.", grove.slug))
    return found


def _isolation_keys(grove: GroveFacts) -> tuple[str, ...]:
    """The isolation modes the Grove can really give: host-process only on a native Grove, whatever it claims."""
    return tuple(mode for mode in grove.isolation_modes
                 if mode != IsolationMode.HOST_PROCESS or grove.substrate == Substrate.NATIVE)


ISOLATION = Rule("isolation", ("host_process_needs_native", "isolation_unavailable"), check=_isolation,
                 keys=_isolation_keys, accepts=lambda req: (req.compatibility.isolation,))


def _trust(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    if req.trust != Trust.UNTRUSTED or grove.substrate == Substrate.KUBERNETES:
        return []
    return [Incompatibility(
        "untrusted_needs_kubernetes",
        f"Untrusted work runs only on a Kubernetes Grove; {grove.slug} is {grove.substrate} and would run it "
        "with the machine's own trust.", grove.slug)]


TRUST = Rule("trust", ("untrusted_needs_kubernetes",), check=_trust, keys=lambda grove: (grove.substrate,),
             accepts=lambda req: (Substrate.KUBERNETES,) if req.trust == Trust.UNTRUSTED else None)


def _change_kind(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    change_kind = req.compatibility.change_kind
    if change_kind in grove.change_kinds:
        return []
    advertised = ", ".join(sorted(grove.change_kinds)) or "nothing"
    return [Incompatibility(
        "change_kind_not_advertised",
        f"Grove {grove.slug} advertises {advertised}; it does not understand {change_kind}.", grove.slug)]


CHANGE_KIND = Rule("change_kind", ("change_kind_not_advertised",), check=_change_kind,
                   keys=lambda grove: grove.change_kinds, accepts=lambda req: (req.compatibility.change_kind,))

def _readiness(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    if grove.ready:
        return []
    polled = ("has never polled for work" if grove.last_polled_at is None
              else f"last polled for work at {grove.last_polled_at:%Y-%m-%d %H:%M:%S} UTC")
    return [Incompatibility(
        "grove_not_polling",
        f"Grove {grove.slug} is live (it heartbeats) but not ready: it {polled}, so nothing there would claim "
        "this work.", grove.slug)]


# Every requirement needs a ready Grove, whatever else it needs: the rule constrains every requirement.
READINESS = Rule("readiness", ("grove_not_polling",), check=_readiness, keys=lambda grove: (grove.ready,),
                 accepts=lambda req: (True,))

RULES: tuple[Rule, ...] = (ROLE, PLATFORM, SUBSTRATE, ISOLATION, TRUST, CHANGE_KIND, READINESS)
CODES = tuple(code for rule in RULES for code in rule.codes)


def check(req: ExecutionRequirement, grove: GroveFacts, *,
          rules: Iterable[Rule] | None = None) -> list[Incompatibility]:
    """Every incompatibility between the requirement and the Grove (empty = compatible). ``rules``
    defaults to ``RULES`` as it is at call time; the order of the result never depends on theirs."""
    found: list[Incompatibility] = []
    for rule in RULES if rules is None else rules:
        found.extend(rule.check(req, grove))
    return sorted(found, key=lambda item: (CODES.index(item.code) if item.code in CODES else len(CODES), item))


def platform_rank(platforms: Sequence[str], allowed: Collection[str]) -> int:
    """Position of the first accepted platform in the Grove's preference order (0 when any platform will
    do; ``NO_PLATFORM_RANK`` when none is accepted): lower ranks first."""
    if not allowed:
        return 0
    for rank, platform in enumerate(platforms[:MAX_GROVE_PLATFORMS]):
        if platform in allowed:
            return rank
    return NO_PLATFORM_RANK


def selected_platform(req: ExecutionRequirement, grove: GroveFacts) -> str:
    """The Grove's most preferred platform the work accepts (its first platform when any will do)."""
    if not grove.platforms:
        return ""
    return platform_at(grove.platforms, platform_rank(grove.platforms, frozenset(req.compatibility.platform.allowed)))


def platform_at(platforms: Sequence[str], rank: int) -> str:
    """``selected_platform`` from the Grove's ``platform_rank`` for the work, already known (a sampled
    candidate carries it): the platform at that position, the first when none is accepted."""
    if not platforms:
        return ""
    return platforms[rank if rank < len(platforms) else 0]


def summarise(verdicts: Sequence[dict[str, Any]]) -> str:
    """A scheduler-style line: '0/5 Groves eligible: 3 platform_mismatch, 2 substrate_mismatch'."""
    counts: dict[str, int] = {}
    eligible = 0
    for verdict in verdicts:
        if verdict["eligible"]:
            eligible += 1
        for code in {item["code"] for item in verdict["incompatibilities"]}:
            counts[code] = counts.get(code, 0) + 1
    parts = ", ".join(f"{n} {code}" for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{eligible}/{len(verdicts)} Groves eligible" + (f": {parts}" if parts else "")
