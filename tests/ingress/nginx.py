"""Debian's real nginx as the tests run it: unprivileged, a non-daemon child process with a prefix, main
file and include directory of its own (the edge command's own main-file writer for the layout)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from forest_agent.nginx import NginxCommand, NginxConfigFiles

from apps.ingress.management.commands.forest_edge import serve_main_config
from tests.pipelines.conftest import wait_for

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


class NginxProcess:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.conf_dir = self.root / "conf.d"
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.main = serve_main_config(self.root, self.conf_dir)
        self.command = NginxCommand(binary=NGINX, main_config=self.main, prefix=self.root)
        self.proc: subprocess.Popen | None = None

    def start(self) -> NginxProcess:
        self.proc = subprocess.Popen(self.command.argv("-g", "daemon off;"), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE)
        # Reloads signal the pid in this file: it exists once the master is up.
        wait_for(lambda: (self.root / "nginx.pid").exists() or self.proc.poll() is not None,
                 what="nginx to write its pid file")
        assert self.proc.poll() is None, self.proc.stderr.read().decode()
        return self

    def files(self) -> NginxConfigFiles:
        return NginxConfigFiles(self.conf_dir, self.command)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
