"""The restart journal: one small JSON file per native job, written before each step that matters.

A job is never silently forgotten. The entry is written when the job is claimed, updated with the
pid and start time once it runs, with the outcome once it ends, and deleted only after Host has
accepted the terminal report. On restart the agent reads every entry left behind:

    claimed  -> the agent died before spawning: report failed, reason `agent_restarted`
    running  -> same pid + start time still alive: re-attach and keep watching;
                ended with an exit-code file: report its real outcome;
                otherwise: report failed, reason `agent_restarted`
    finished -> the outcome is known but the report never landed: send it again
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from forest_agent.state import write_private_json

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.json"


@dataclass
class Outcome:
    state: str  # succeeded | failed | timed_out | cancelled
    exit_code: int | None = None
    reason: str | None = None

    def report_body(self, log_tail: list[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state, "log_tail": log_tail}
        if self.exit_code is not None:
            body["exit_code"] = self.exit_code
        if self.reason is not None:
            body["reason"] = self.reason
        return body


@dataclass
class JournalEntry:
    job_id: str
    phase: str  # claimed | running | finished
    job: dict[str, Any]
    pid: int | None = None
    pgid: int | None = None
    start_time: float | None = None
    deadline_wall: float | None = None
    outcome: Outcome | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class JobJournal:
    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir

    def job_dir(self, job_id: str) -> Path:
        # Host's job ids are opaque; keep them from naming a path outside jobs/.
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id).lstrip(".") or "_"
        return self.jobs_dir / safe

    def write(self, entry: JournalEntry) -> None:
        directory = self.job_dir(entry.job_id)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private_json(directory / JOURNAL_FILE, asdict(entry))

    def remove(self, job_id: str) -> None:
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def entries(self) -> list[JournalEntry]:
        found: list[JournalEntry] = []
        if not self.jobs_dir.is_dir():
            return found
        for path in sorted(self.jobs_dir.glob(f"*/{JOURNAL_FILE}")):
            try:
                raw = json.loads(path.read_text())
                outcome = Outcome(**raw["outcome"]) if raw.get("outcome") else None
                raw["outcome"] = outcome
                found.append(JournalEntry(**raw))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.error("unreadable journal entry %s (%s); leaving it for inspection", path, exc)
        return found
