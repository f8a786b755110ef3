"""Step outputs, the same way on both executors (docs/wire.md, "Step outputs").

* A step reports outputs by writing one JSON object to the file named by `$FOREST_OUTPUTS_FILE`
  (native: a file in the job directory; Kubernetes: the container's termination message file,
  `/dev/termination-log`). The executor sends it as the report's `outputs`.
* A step reads what the steps it needs reported from `$FOREST_NEEDS_OUTPUTS`: a JSON object
  `{node id: outputs}` from the job payload's `needs_outputs`.
Anything that is not a JSON object of at most `MAX_OUTPUTS_BYTES` is not sent (a log line says why).
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)

OUTPUTS_FILE_ENV = "FOREST_OUTPUTS_FILE"
NEEDS_OUTPUTS_ENV = "FOREST_NEEDS_OUTPUTS"
MAX_OUTPUTS_BYTES = 64 * 1024  # Host refuses larger `outputs`


def parse_outputs(text: str | None, *, where: str) -> dict[str, Any] | None:
    if not text or not text.strip():
        return None
    if len(text.encode()) > MAX_OUTPUTS_BYTES:
        log.warning("%s: outputs larger than %d bytes are not sent", where, MAX_OUTPUTS_BYTES)
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None  # e.g. a termination message that is plain text (log fallback on error)
    if not isinstance(value, dict):
        log.warning("%s: outputs must be a JSON object; not sent", where)
        return None
    return value


def needs_outputs_env(needs_outputs: dict[str, Any]) -> dict[str, str]:
    return {NEEDS_OUTPUTS_ENV: json.dumps(needs_outputs, sort_keys=True, separators=(",", ":"))}
