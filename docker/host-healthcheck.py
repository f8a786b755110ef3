"""Docker HEALTHCHECK of the Forest Host image: what "healthy" means depends on the process.

web     GET /healthz on this container (200 also means the database answered)
worker  a Celery ping answered by this node (the broker and the worker's pool are alive)
runner  the same, for the runner pool's node
other   (beat, migrate, manage, edge) healthy while the process runs: nothing to ask
The process is read from PID 1's command line; exit 0 healthy, 1 unhealthy.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request


def role() -> str:
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
    if which in ("worker", "runner"):
        node = f"{'celery' if which == 'worker' else 'runner'}@{socket.gethostname()}"  # pipeline_runner's -n
        command = ["celery", "-A", "forest_host", "inspect", "ping", "--timeout", "5", "--destination", node]
        done = subprocess.run(command, capture_output=True, timeout=20, check=False)
        return 0 if done.returncode == 0 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
