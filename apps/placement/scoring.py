"""Score plugins: how the chooser ranks the Groves the rules and resource admission let through. Pure.

kube-scheduler's framework, filter → score → normalize → weight: ``rules.RULES`` filter (eligible or not,
with codes), ``admission.fit`` filters by room (now, later, never), and every Grove that holds the work now
is scored by each plugin of ``PLUGINS`` (declared here, one table beside the rules). Each plugin is a small
pure function of the requirement's needs, the Grove's facts and its load, returning a score normalised to
0..1 (1 is best). The total is the documented weighted mean of **every** plugin's score::

    total = sum(weight[p] * score[p] for p in PLUGINS) / sum(weight[p] for p in PLUGINS)

Weights come from settings (``PLACEMENT_SCORE_WEIGHTS``); the *policy* (``PLACEMENT_POLICY``: spread or
bin-pack, per Grove family, accelerator work apart) sets the weight of the plugin it does not use to 0. A
plugin with weight 0 is still computed and shown (a zero column, not a missing one), as Nomad's
``alloc status -verbose`` users asked for. Ties in the total break by ``tie_key(subject, grove)``, a stable
hash, never by slug: equal Groves share equal work, and the same subject always gets the same answer.
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

SPREAD, BINPACK = "spread", "binpack"
POLICIES = (SPREAD, BINPACK)
# A requirement that asks for accelerators is judged by this key of the policy table, not by its family.
ACCELERATORS = "accelerators"
# A Grove's operator preference (staff set it per Grove in admin): 0..PREFERENCE_MAX, default in between.
PREFERENCE_MAX = 100
PREFERENCE_DEFAULT = 50
# Totals equal to this many decimals are a tie (floating-point noise is not a preference).
TOTAL_DIGITS = 9


@dataclass(frozen=True, slots=True)
class Load:
    """What a Grove holds when the work would be placed on it: the sums over its units of allocatable and
    free (before this work) CPU and memory, and how many placements of the subject's spread group (one
    run's steps) it already has. The fleet-facts parts (allocatable, preference, platform position) are
    cached per facts; the free counts and the group count move with every placement."""

    cpu_allocatable: int
    cpu_free: int
    memory_allocatable: int
    memory_free: int
    group: int = 0
    preference: int = PREFERENCE_DEFAULT
    platform_rank: int = 0


@dataclass(frozen=True, slots=True)
class Needs:
    cpu_milli: int
    memory_bytes: int


def _share(allocatable: int, free: int, need: int) -> float:
    """The share of one resource allocated once the work is placed (0 empty, 1 full)."""
    if allocatable <= 0:
        return 1.0
    share = (allocatable - free + need) / allocatable
    return 1.0 if share > 1.0 else 0.0 if share < 0.0 else share  # clamped (min/max cost more, per Grove)


def allocated(cpu_need: int, memory_need: int, cpu_allocatable: int, cpu_free: int, memory_allocatable: int,
              memory_free: int) -> float:
    """The mean share of CPU and memory allocated once the work is placed (0 empty, 1 full): of a Grove's
    totals for the spread and bin-pack plugins, of one unit for the unit a spread placement takes
    (``admission.unit_for``)."""
    return (_share(cpu_allocatable, cpu_free, cpu_need) + _share(memory_allocatable, memory_free, memory_need)) / 2


def _allocated_after(needs: Needs, load: Load) -> float:
    return allocated(needs.cpu_milli, needs.memory_bytes, load.cpu_allocatable, load.cpu_free,
                      load.memory_allocatable, load.memory_free)


def _platform(platform_rank: int) -> float:
    return 1.0 / (1 + platform_rank)


def _run_spread(group: int) -> float:
    return 1.0 / (1 + group)


def _preference(value: int) -> float:
    return min(max(value, 0), PREFERENCE_MAX) / PREFERENCE_MAX


def spread(needs: Needs, load: Load) -> float:
    """Least allocated after this placement (Nomad's spread, kube's LeastAllocated): emptier is better."""
    return 1.0 - _allocated_after(needs, load)


def binpack(needs: Needs, load: Load) -> float:
    """Most allocated after this placement (Nomad's bin-pack, kube's MostAllocated): fuller is better."""
    return _allocated_after(needs, load)


def platform(needs: Needs, load: Load) -> float:
    """The Grove's own platform order: 1 when its first platform is the one the work runs on, 1/2 for
    its second, and so on (what was the chooser's first key before scoring)."""
    return _platform(load.platform_rank)


def run_spread(needs: Needs, load: Load) -> float:
    """Anti-affinity: 1 on a Grove holding none of the group's work (one run's steps), 1/(n+1) with n."""
    return _run_spread(load.group)


def preference(needs: Needs, load: Load) -> float:
    """The operator's preference for the Grove, set by staff in admin (audited), 0..1."""
    return _preference(load.preference)


@dataclass(frozen=True, slots=True)
class Plugin:
    name: str
    score: object  # (Needs, Load) -> float in 0..1
    doc: str


# The one table of score plugins, in column order (explanations show every column, zeros included).
PLUGINS: tuple[Plugin, ...] = (
    Plugin("platform", platform, "the Grove's platform order"),
    Plugin(SPREAD, spread, "least allocated after placement"),
    Plugin(BINPACK, binpack, "most allocated after placement"),
    Plugin("run_spread", run_spread, "fewest of the same run's steps"),
    Plugin("preference", preference, "the operator's preference"),
)
NAMES = tuple(plugin.name for plugin in PLUGINS)


@dataclass(frozen=True)
class Policy:
    """The weight of every plugin for one decision, and the policy (spread or bin-pack) that set them."""

    name: str
    weights: tuple[tuple[str, float], ...]

    @functools.cached_property
    def total_weight(self) -> float:
        return sum(weight for _name, weight in self.weights)

    @functools.cached_property
    def weighted(self) -> tuple:
        """(weight, scorer) of every plugin whose weight is not 0, in column order."""
        return tuple((weight, plugin.score) for (_name, weight), plugin in zip(self.weights, PLUGINS, strict=True)
                     if weight)

    @functools.cached_property
    def weighted_columns(self) -> tuple:
        """(weight, column index) of every plugin whose weight is not 0, in column order (``total_from``)."""
        return tuple((weight, index) for index, (_name, weight) in enumerate(self.weights) if weight)

    @property
    def spreads_units(self) -> bool:
        """Within the chosen Grove, the work goes to the least allocated unit that holds it (spread), or to
        the first one in the Grove's order (bin-pack: the Grove's first units fill first)."""
        return self.name == SPREAD

    def to_json(self) -> dict:
        return {"policy": self.name, "weights": dict(self.weights)}


def policy_for(*, family: str, accelerators: bool, policies: Mapping[str, str],
               weights: Mapping[str, float]) -> Policy:
    """The policy for work of this family (accelerator work by the ``accelerators`` entry): the plugin
    the policy does not use (bin-pack under spread, spread under bin-pack) weighs 0."""
    return _policy(ACCELERATORS if accelerators else family, tuple(sorted(policies.items())),
                   tuple(sorted(weights.items())))


@functools.lru_cache(maxsize=64)
def _policy(key: str, policies: tuple, weights: tuple) -> Policy:
    policies, weights = dict(policies), dict(weights)
    name = policies.get(key) or policies.get("default") or SPREAD
    if name not in POLICIES:
        name = SPREAD
    unused = BINPACK if name == SPREAD else SPREAD
    return Policy(name, tuple((plugin.name, 0.0 if plugin.name == unused else float(weights.get(plugin.name, 0.0)))
                              for plugin in PLUGINS))


@dataclass(frozen=True, slots=True)
class Score:
    """Every plugin's score (``columns``, in ``PLUGINS`` order) and the weighted total."""

    columns: tuple[float, ...]
    total: float

    def to_json(self) -> dict:
        known = _SHOWN.get  # (a value found is the rounding; 0.0 or none found: ``_shown`` answers)
        body = dict(zip(NAMES, [known(value) or _shown(value) for value in self.columns]))  # noqa: B905 - one each
        body["total"] = known(self.total) or _shown(self.total)
        return body


# ``round(value, 4)`` by value: rounding a float to digits costs a decimal conversion both ways, and the values
# shown repeat (platform, run-spread and preference columns take a few values; equal Groves equal loads).
_SHOWN: dict[float, float] = {}


def _shown(value: float) -> float:
    shown = _SHOWN.get(value)
    if shown is None:
        shown = round(value, 4)
        if value:  # never 0.0: -0.0 would find it (equal keys) and lose its sign
            if len(_SHOWN) >= 100_000:
                _SHOWN.clear()
            _SHOWN[value] = shown
    return shown


_SCORERS = tuple(plugin.score for plugin in PLUGINS)


def total(needs: Needs, load: Load, policy: Policy) -> float:
    """``score(...).total`` to the last bit, computing only the plugins with a weight (a zero-weight column
    adds exactly 0.0): what ranking reads for every candidate; the columns are built for the few shown."""
    weight = policy.total_weight
    if not weight:
        return 0.0
    value = 0.0
    for plugin_weight, scorer in policy.weighted:
        value += plugin_weight * scorer(needs, load)
    return value / weight


def total_from(policy: Policy, columns: tuple[float, ...]) -> float:
    """The weighted mean of the columns (the module docstring's formula): each weighted column added in
    column order, a zero-weight one skipped (it adds exactly 0.0). The one sum every total is computed with
    (``score``, ``score_of``, ``total_of``): a ``Score(columns, total_from(policy, columns))`` is ``score``'s."""
    weight = policy.total_weight
    if not weight:
        return 0.0
    value = 0.0
    for plugin_weight, index in policy.weighted_columns:
        value += plugin_weight * columns[index]
    return value / weight


# ``columns_of`` builds the columns in this order without the plugin table; a plugin added to PLUGINS must be
# added there too (this check and the bit-equality test say so).
_FUSED = ("platform", SPREAD, BINPACK, "run_spread", "preference")
if NAMES != _FUSED:
    raise ImportError(f"scoring.columns_of builds the columns {_FUSED}, not {NAMES}")


def columns_of(cpu_need: int, memory_need: int, cpu_allocatable: int, cpu_free: int, memory_allocatable: int,
             memory_free: int, group: int, preference_value: int, platform_rank: int) -> tuple[float, ...]:
    """Every plugin's column from the plain numbers a ``Load`` holds, without building one or calling each
    plugin: the same helpers the plugins call, so the same floats."""
    share = allocated(cpu_need, memory_need, cpu_allocatable, cpu_free, memory_allocatable, memory_free)
    return (_platform(platform_rank), 1.0 - share, share, _run_spread(group), _preference(preference_value))


def total_of(policy: Policy, cpu_need: int, memory_need: int, cpu_allocatable: int, cpu_free: int,
             memory_allocatable: int, memory_free: int, group: int, preference_value: int,
             platform_rank: int) -> float:
    """``total`` from the plain numbers a ``Load`` holds, without building one: what a batch's ranking
    reads for every sampled Grove. The same columns, the same sum: the same float to the bit as
    ``score(...).total`` (tests/placement/test_scoring.py checks it)."""
    return total_from(policy, columns_of(cpu_need, memory_need, cpu_allocatable, cpu_free, memory_allocatable,
                                      memory_free, group, preference_value, platform_rank))


def score_of(policy: Policy, cpu_need: int, memory_need: int, cpu_allocatable: int, cpu_free: int,
             memory_allocatable: int, memory_free: int, group: int, preference_value: int,
             platform_rank: int) -> Score:
    """``score`` from the plain numbers a ``Load`` holds (what a batch's ranking already has), without
    building one or calling each plugin: the same columns and the same total to the bit (the same helpers,
    the same sum; tests/placement/test_scoring.py checks it)."""
    columns = columns_of(cpu_need, memory_need, cpu_allocatable, cpu_free, memory_allocatable, memory_free, group,
                       preference_value, platform_rank)
    return Score(columns, total_from(policy, columns))


def score(needs: Needs, load: Load, policy: Policy) -> Score:
    """Every plugin's score and the weighted total (the module docstring's formula)."""
    columns = tuple([scorer(needs, load) for scorer in _SCORERS])
    return Score(columns, total_from(policy, columns))


# Totals further apart than this never round to the same ``TOTAL_DIGITS`` decimals: each rounds to a multiple
# of 10**-TOTAL_DIGITS within half of one, and below ``_TIE_EXACT`` a double's spacing is far finer than that
# (so two such multiples stay two doubles, and the difference computed is the true one to within it).
_TIE_GAP = 2 * 10.0**-TOTAL_DIGITS
_TIE_EXACT = 1e6


def tied(first: float, other: float) -> bool:
    """Whether two totals are equal to ``TOTAL_DIGITS`` decimals (a tie: floating-point noise is not a
    preference): ``round(first, TOTAL_DIGITS) == round(other, TOTAL_DIGITS)``, rounding only when the two
    are close enough for it to matter (rounding a float to digits is a decimal conversion both ways)."""
    if first == other:
        return True
    if abs(first - other) > _TIE_GAP and abs(first) < _TIE_EXACT:
        return False
    return round(first, TOTAL_DIGITS) == round(other, TOTAL_DIGITS)


def tie_order(subject: str) -> Callable[[str], bytes]:
    """``tie_key(subject, grove_id)`` for many Groves of one subject, as the hash's 8 big-endian bytes (which
    sort as the number does): the subject's part is hashed once, each Grove's id added to a copy."""
    prefix = hashlib.blake2b(f"{subject}\x00".encode(), digest_size=8)

    def key(grove_id: str) -> bytes:
        hashed = prefix.copy()
        hashed.update(grove_id.encode())
        return hashed.digest()

    return key


def tie_key(subject: str, grove_id: str) -> int:
    """A stable 64-bit hash of (subject, Grove): the tie-break between equal totals."""
    return int.from_bytes(tie_order(subject)(grove_id), "big")


def ring_point(value: str) -> int:
    """Where a Grove (or a subject) sits on the sampling ring (see ``fleet.FleetIndex.sample``)."""
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "big")


def why(chosen: str, chosen_score: Score, runner_up: str | None, runner_score: Score | None,
        policy: Policy) -> str:
    """One sentence: "chosen over k8s-gpu-2 by spread (0.62 vs 0.41)" — the weighted plugin that separated
    the two most; "by the tie-break" when every column is equal."""
    if runner_up is None or runner_score is None:
        return f"{chosen}: the only Grove with room now (total {chosen_score.total:.2f})."
    best, gap = None, 0.0
    for (name, weight), mine, theirs in zip(policy.weights, chosen_score.columns, runner_score.columns, strict=True):
        contribution = weight * (mine - theirs)
        if contribution > gap + 1e-12:
            best, gap = (name, mine, theirs), contribution
    if best is None:
        return (f"{chosen} chosen over {runner_up} by the tie-break (equal totals {chosen_score.total:.2f}; a "
                "stable hash of the subject and the Grove).")
    name, mine, theirs = best
    return (f"{chosen} chosen over {runner_up} by {name} ({mine:.2f} vs {theirs:.2f}; total "
            f"{chosen_score.total:.2f} vs {runner_score.total:.2f}).")


def cells(stored: dict | None) -> list[str]:
    """A stored score (``Score.to_json``) as one text cell per plugin, then the total: every column shown,
    zeros included; "—" throughout for a candidate that was not scored (no room now, or not eligible)."""
    if not stored:
        return ["—"] * (len(NAMES) + 1)
    return [f"{float(stored.get(name, 0.0)):.2f}" for name in NAMES] + [f"{float(stored.get('total', 0.0)):.2f}"]
