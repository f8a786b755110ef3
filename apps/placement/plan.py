"""A batch's plan for one subject: what ``writes`` stores for it and what ``ledger`` re-verifies. Its own module
so the two use one definition without importing each other (``writes`` calls ``ledger``, never the reverse;
the import contract in pyproject.toml keeps it)."""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from apps.placement.requirements import ExecutionRequirement
from apps.placement.rules import GroveFacts


@dataclass
class Plan:
    """One subject a batch decided to place: what is written for it, and what is re-verified."""

    index: int
    subject_type: str
    subject_id: str
    requirement: ExecutionRequirement
    requirement_json: str
    facts: GroveFacts
    unit_id: str | None
    decision: dict
    chooser: str
    enforced: bool
    would_refuse: bool
    team: str
    environment: str
    group: str
    verdicts_key: str = ""
    verdicts_json: str = ""  # the shared verdicts' JSON, encoded once per shape (``PlacementVerdicts.body``)
    # A batch subject's stored decision is ``own`` (its choice) and the keys every subject of its
    # requirement shares, encoded once (``shared_json``, without braces): ``decision`` is both merged.
    own: dict | None = None
    shared_json: str = ""

    def note(self, key: str, value) -> None:
        """Add a key to the stored decision (``earlier``: the refusal the placement supersedes)."""
        self.decision[key] = value
        if self.own is not None:
            self.own[key] = value

    def decision_json(self) -> str:
        # orjson: a tenth of the encoding time of ``json.dumps`` for a ~1.5 KB decision, once per row
        # (docs/decisions.md "C1M speed, fifth pass"); ``jsonb`` keeps no formatting.
        if self.own is None or not self.shared_json:
            return orjson.dumps(self.decision).decode()
        return orjson.dumps(self.own)[:-1].decode() + "," + self.shared_json + "}"
