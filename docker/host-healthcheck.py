"""Docker HEALTHCHECK of the Forest Host image: what "healthy" means depends on the process.

web     GET /healthz on this container (200 also means the database answered)
worker  its heartbeat file (FOREST_VAR_DIR/liveness/celery@<host>) is younger than FOREST_LIVENESS_STALE_S:
        the worker touches it only while connected to the broker and consuming (forest_host/liveness.py)
runner  the same, for the runner pool's node (runner@<host>)
beat    the same (beat@<host>): touched after each publish that reached the broker
other   (migrate, manage, edge) healthy while the process runs: nothing to ask
The process is read from PID 1's command line; exit 0 healthy, 1 unhealthy.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # /app: forest_host.liveness, no Django
from forest_host.liveness import is_live


def role(argv: list[str] | None = None) -> str:
    """The process `argv` (default: PID 1's, the entrypoint's exec) runs: web, worker, runner, beat or other."""
    if argv is None:
        try:
            with open("/proc/1/cmdline", "rb") as handle:
                argv = [part.decode() for part in handle.read().split(b"\0") if part]
        except OSError:
            return "unknown"
    text = " ".join(argv)
    if "uvicorn" in text:
        return "web"
    if "pipeline_runner" in text:
        return "runner"
    if "celery" in text and " worker" in text:
        return "worker"
    if "celery" in text and " beat" in text:
        return "beat"
    return "other"


def main() -> int:
    which = role()
    if which == "web":
        url = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return 0 if answer.status == 200 else 1
        except OSError:
            return 1
    if which in ("worker", "runner", "beat"):
        # the node names Celery and pipeline_runner use by default (-n celery@%h, runner@%h), and beat's
        node = f"{ {'worker': 'celery'}.get(which, which)}@{socket.gethostname()}"
        return 0 if is_live(node) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
