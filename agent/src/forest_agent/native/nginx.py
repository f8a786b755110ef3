"""nginx proxy manager: one server block per workload (plain HTTP on the mesh address -> the
workload's local port), `nginx -t` before every reload, and the previous file restored when the
test or the reload fails. Public TLS stays at Host's nginx (design note); this is the mesh hop.

Inputs are validated before rendering so a Host-supplied name can never inject nginx directives.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from forest_agent.errors import IngressRefused
from forest_agent.oskit import CommandRunner
from forest_agent.wire.messages import Ingress

log = logging.getLogger(__name__)

_SERVER_NAME = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$")
_WORKLOAD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


def validate_listen(listen: str) -> str:
    """`ADDRESS:PORT` with an IPv4 or bracketed IPv6 literal, or a bare port."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        host, port = "", listen
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise IngressRefused(f"ingress listen {listen!r} needs a port 1..65535")
    if host:
        literal = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        try:
            address = ipaddress.ip_address(literal)
        except ValueError:
            raise IngressRefused(f"ingress listen {listen!r} must use an IP address, not a name") from None
        if address.version == 6 and not host.startswith("["):
            raise IngressRefused(f"ingress listen {listen!r}: IPv6 addresses need brackets")
    return listen


def render_server_block(workload: str, ingress: Ingress) -> str:
    if not _WORKLOAD.match(workload):
        raise IngressRefused(f"workload name {workload!r} cannot name an nginx config file")
    listen = validate_listen(ingress.listen)
    if not _SERVER_NAME.match(ingress.server_name):
        raise IngressRefused(f"ingress server_name {ingress.server_name!r} is not a host name")
    if not 0 < ingress.port < 65536:
        raise IngressRefused(f"ingress port {ingress.port} is not a TCP port")
    return (
        f"# managed by forest-agent for workload {workload}; rewritten on every generation\n"
        "server {\n"
        f"    listen {listen};\n"
        f"    server_name {ingress.server_name};\n"
        "    location / {\n"
        f"        proxy_pass http://127.0.0.1:{ingress.port};\n"
        "        proxy_http_version 1.1;\n"
        "        proxy_set_header Host $host;\n"
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "        proxy_set_header X-Forwarded-Proto $http_x_forwarded_proto;\n"
        '        proxy_set_header Connection "";\n'
        "    }\n"
        "}\n"
    )


@dataclass(frozen=True)
class NginxCommand:
    """How to reach the nginx instance whose config includes `conf_dir/*.conf`."""

    binary: str = "nginx"
    main_config: Path | None = None
    prefix: Path | None = None

    def argv(self, *args: str) -> list[str]:
        argv = [self.binary]
        if self.prefix is not None:
            argv += ["-p", str(self.prefix)]
        if self.main_config is not None:
            argv += ["-c", str(self.main_config)]
        return argv + list(args)


class NginxProxyManager:
    def __init__(self, conf_dir: Path, command: NginxCommand, runner: CommandRunner | None = None) -> None:
        self.conf_dir = conf_dir
        self.command = command
        self.runner = runner or CommandRunner()

    def path_for(self, workload: str) -> Path:
        return self.conf_dir / f"forest-{workload}.conf"

    def apply(self, workload: str, ingress: Ingress) -> Path:
        """Install or replace the workload's server block; on any failure the old file is back."""
        text = render_server_block(workload, ingress)
        path = self.path_for(workload)
        old = path.read_text() if path.exists() else None
        if old == text:
            return path
        _write_atomic(path, text)
        self._test_and_reload(path, old, workload)
        log.info(
            "ingress for %s: %s (%s) -> 127.0.0.1:%d",
            workload,
            ingress.listen,
            ingress.server_name,
            ingress.port,
        )
        return path

    def remove(self, workload: str) -> None:
        path = self.path_for(workload)
        if not path.exists():
            return
        old = path.read_text()
        path.unlink()
        self._test_and_reload(path, old, workload)

    def _test_and_reload(self, path: Path, old: str | None, workload: str) -> None:
        test = self.runner.run(self.command.argv("-t"), timeout_s=30.0)
        if test is None or test.returncode != 0:
            self._restore(path, old)
            detail = _first_error(test.stderr if test else "nginx binary not found")
            raise IngressRefused(
                f"nginx -t rejected the config for {workload}; previous config restored: {detail}",
                code="ingress_config_rejected",
            )
        reload = self.runner.run(self.command.argv("-s", "reload"), timeout_s=30.0)
        if reload is None or reload.returncode != 0:
            self._restore(path, old)
            detail = _first_error(reload.stderr if reload else "nginx binary not found")
            raise IngressRefused(
                f"nginx reload failed for {workload}; previous config restored: {detail}",
                code="ingress_reload_failed",
            )

    @staticmethod
    def _restore(path: Path, old: str | None) -> None:
        if old is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            _write_atomic(path, old)


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temp name nginx's `*.conf` include does not match, so a half-written file is never loaded.
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "[emerg]" in line or "[error]" in line:
            return line.strip()
    lines = stderr.strip().splitlines()
    return lines[0] if lines else "no detail"
