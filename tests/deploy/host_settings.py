"""The environment variables Host reads: its settings, its liveness module and the image's entrypoint. One
list for the chart's tests and the example environment file's."""

from __future__ import annotations

import re

from tests.deploy.chart import REPO

READERS = (REPO / "forest_host" / "settings.py", REPO / "forest_host" / "liveness.py")
# os.environ.get("NAME" / os.environ["NAME"] / env_bool("NAME" / env_list("NAME", the first argument
_READ = re.compile(r"""(?:environ\.get|environ\[|\benv_\w+)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
# ${NAME:-default} / "$NAME" in the entrypoint
_SHELL = re.compile(r"\$\{?([A-Z][A-Z0-9_]+)")


def settings_host_reads() -> set[str]:
    names: set[str] = set()
    for path in READERS:
        names |= set(_READ.findall(path.read_text()))
    names |= set(_SHELL.findall((REPO / "docker" / "host-entrypoint.sh").read_text()))
    return names
