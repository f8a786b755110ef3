"""The compatibility checker (DESIGN.md §2) and the chooser's ranking. Pure: no Django, no database.

Each rule is a small function ``(requirement, grove) -> list[Incompatibility]``; ``check`` runs all of
them and returns *every* incompatibility, never just the first, in a fixed order (the order of
``RULES``, then by code) so the result does not depend on list order in the inputs. Accelerators are
deliberately not here: admission and policy are separate steps with their own codes
(``apps.accelerators``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from apps.placement.requirements import ExecutionRequirement, substrate_for_change_kind


@dataclass(frozen=True)
class GroveFacts:
    """What placement needs to know about a Grove, as plain data (built from the model by services)."""

    id: str
    slug: str
    substrate: str
    roles: tuple[str, ...]
    platforms: tuple[str, ...]  # preference order
    isolation_modes: tuple[str, ...]
    change_kinds: tuple[str, ...]


@dataclass(frozen=True, order=True)
class Incompatibility:
    code: str
    message: str
    grove: str = ""

    def to_json(self) -> dict:
        return {"code": self.code, "message": self.message, "grove": self.grove}


Rule = Callable[[ExecutionRequirement, GroveFacts], list[Incompatibility]]


def rule_role(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    if req.family in grove.roles:
        return []
    held = ", ".join(sorted(grove.roles)) or "no role"
    return [Incompatibility("role_missing", f"Grove {grove.slug} holds {held}, not the {req.family} role this "
                            "work needs.", grove.slug)]


def rule_platform(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    allowed = req.compatibility.platform.allowed
    if not allowed or set(allowed) & set(grove.platforms):
        return []
    sources = ", ".join(req.compatibility.platform.sources)
    return [Incompatibility(
        "platform_mismatch",
        f"The work runs on {', '.join(sorted(allowed))} (from {sources}); Grove {grove.slug} reports "
        f"{', '.join(sorted(grove.platforms)) or 'no platform'}.", grove.slug)]


def rule_substrate(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    needed = substrate_for_change_kind(req.compatibility.change_kind)
    if needed is None or needed == grove.substrate:
        return []
    return [Incompatibility(
        "substrate_mismatch",
        f"A {req.compatibility.change_kind} change needs a {needed} Grove; {grove.slug} is {grove.substrate}.",
        grove.slug)]


def rule_isolation(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    isolation = req.compatibility.isolation
    found = []
    if isolation == "host_process" and grove.substrate != "native":
        found.append(Incompatibility(
            "host_process_needs_native",
            f"Host-process isolation exists only on native Groves; {grove.slug} is {grove.substrate}.", grove.slug))
    elif isolation not in grove.isolation_modes:
        offered = ", ".join(sorted(grove.isolation_modes)) or "none"
        found.append(Incompatibility(
            "isolation_unavailable",
            f"The work needs {isolation} isolation; Grove {grove.slug} offers {offered}.", grove.slug))
    return found


def rule_trust(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    if req.trust != "untrusted" or grove.substrate == "kubernetes":
        return []
    return [Incompatibility(
        "untrusted_needs_kubernetes",
        f"Untrusted work runs only on a Kubernetes Grove; {grove.slug} is {grove.substrate} and would run it "
        "with the machine's own trust.", grove.slug)]


def rule_change_kind(req: ExecutionRequirement, grove: GroveFacts) -> list[Incompatibility]:
    change_kind = req.compatibility.change_kind
    if change_kind in grove.change_kinds:
        return []
    advertised = ", ".join(sorted(grove.change_kinds)) or "nothing"
    return [Incompatibility(
        "change_kind_not_advertised",
        f"Grove {grove.slug} advertises {advertised}; it does not understand {change_kind}.", grove.slug)]


RULES: tuple[Rule, ...] = (rule_role, rule_platform, rule_substrate, rule_isolation, rule_trust, rule_change_kind)
CODES = ("role_missing", "platform_mismatch", "substrate_mismatch", "host_process_needs_native",
         "isolation_unavailable", "untrusted_needs_kubernetes", "change_kind_not_advertised")


def check(req: ExecutionRequirement, grove: GroveFacts, *, rules: Iterable[Rule] = RULES) -> list[Incompatibility]:
    """Every incompatibility between the requirement and the Grove (empty = compatible)."""
    found: list[Incompatibility] = []
    for rule in rules:
        found.extend(rule(req, grove))
    return sorted(found, key=lambda item: (CODES.index(item.code) if item.code in CODES else len(CODES), item))


def selected_platform(req: ExecutionRequirement, grove: GroveFacts) -> str:
    """The Grove's most preferred platform the work accepts (its first platform when any will do)."""
    allowed = set(req.compatibility.platform.allowed)
    for platform in grove.platforms:
        if not allowed or platform in allowed:
            return platform
    return grove.platforms[0] if grove.platforms else ""


def platform_rank(req: ExecutionRequirement, grove: GroveFacts) -> int:
    """Position of the selected platform in the Grove's preference list (lower is better)."""
    allowed = set(req.compatibility.platform.allowed)
    for rank, platform in enumerate(grove.platforms):
        if not allowed or platform in allowed:
            return rank
    return len(grove.platforms) + 1000


def rank_key(*, platform_rank: int, fits_cpu_memory: bool, fits_accelerators: bool, slug: str,
             incompatibilities: int = 0) -> tuple:
    """The chooser's order: compatible first, then (a) earliest platform in the Grove's order,
    (b) a unit that fits CPU and memory, then accelerators, then the slug (unique) as tie-break."""
    return (incompatibilities, platform_rank, not fits_cpu_memory, not fits_accelerators, slug)


def summarise(verdicts: Sequence[dict]) -> str:
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
