"""One rendering of a stored decision's outcome, for every surface: the staff list, detail and reports,
the staff API (and so the CLI and MCP, which print what it says), and ``/metrics``. Pure: no Django.

Four outcomes, one key each: ``placed`` (on a Grove, compatible), ``would_refuse`` (placed in shadow mode
although enforcement would have refused it), ``refused`` (no Grove: incompatible with enforcement on, or a
resource/accelerator admission that never fits, or a policy refusal) and ``waiting`` (for capacity). A
refused or waiting decision is never shown as placed, whatever its stored ``would_refuse`` says.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PLACED, WOULD_REFUSE, REFUSED, WAITING = "placed", "would_refuse", "refused", "waiting"
KEYS = (PLACED, WOULD_REFUSE, REFUSED, WAITING)
_LABEL = {PLACED: "placed", WOULD_REFUSE: "would refuse", REFUSED: "refused", WAITING: "waiting"}
_BADGE = {PLACED: "good", WOULD_REFUSE: "warn", REFUSED: "bad", WAITING: "warn"}


@dataclass(frozen=True)
class Rendered:
    key: str  # one of KEYS: the metrics label, the CSV and API value
    label: str  # the words a badge or a table cell shows
    badge: str  # the badge's kind (good | warn | bad)
    codes: tuple[str, ...]  # the codes behind it (the refusal's own code first)
    sentence: str  # one line a person reads

    def to_json(self) -> dict:
        return {"key": self.key, "label": self.label, "codes": list(self.codes), "sentence": self.sentence}


def outcome_key(*, outcome: str, would_refuse: bool) -> str:
    """The outcome's key from the stored columns (``ExecutionPlacement.outcome`` and ``would_refuse``)."""
    if outcome == REFUSED:
        return REFUSED
    if outcome == WAITING:
        return WAITING
    return WOULD_REFUSE if would_refuse else PLACED


def render(*, outcome: str, would_refuse: bool, grove_slug: str = "", grove_gone: bool = False,
           code: str = "", incompatibilities: Iterable[str] = ()) -> Rendered:
    """The outcome of one stored decision, in words: ``code`` is a refused or waiting decision's own code,
    ``incompatibilities`` the codes of the decision's incompatibilities (its chosen Grove's, or the
    closest one's)."""
    key = outcome_key(outcome=outcome, would_refuse=would_refuse)
    codes = tuple(dict.fromkeys([*([code] if code else []), *incompatibilities]))
    where = f"{grove_slug}{' (gone since)' if grove_gone else ''}" if grove_slug else "no Grove"
    joined = ", ".join(codes)
    if key == PLACED:
        sentence = f"Placed on {where}."
    elif key == WOULD_REFUSE:
        sentence = (f"Placed on {where} although enforcement would have refused it ({joined}): compatibility "
                    "enforcement was off.")
    elif key == REFUSED:
        sentence = f"Refused before dispatch ({joined or 'no code'}): placed on no Grove."
    else:
        sentence = f"Waiting for capacity ({joined or 'no code'}): placed on no Grove yet."
    return Rendered(key=key, label=_LABEL[key], badge=_BADGE[key], codes=codes, sentence=sentence)


def candidate_fit_label(verdict: dict) -> tuple[str, str]:
    """A candidate Grove's verdict in a decision's "why not" table: (label, badge kind). A compatible Grove the
    work never fits is not "eligible: yes"."""
    if not verdict.get("eligible"):
        return "no", "bad"
    state = (verdict.get("fit") or {}).get("state")
    if state == "never":
        return "compatible, never fits", "bad"
    if state == "later":
        return "compatible, fits later", "warn"
    return "yes", "good"
