"""nginx for both ingress hops: one renderer and one config-file manager, shared by the native agent's
mesh proxy (`forest_agent.native.nginx`) and Host's public edge (`manage.py forest_edge`).

The hops, as the design keeps them: public TLS terminates at Host's edge; the edge sends plain HTTP over
the mesh to the agent's proxy (the Grove's mesh address and proxy port); the agent's proxy sends it to
the workload on 127.0.0.1. Every value rendered here is validated first, so a name that came from a
person or from Host can never inject an nginx directive. Writing a config is always: write, `nginx -t`,
reload, and put the previous file back when either fails.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from forest_agent.errors import IngressRefused
from forest_agent.oskit import CommandRunner

_HOSTNAME = re.compile(r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$")
_PATH_PREFIX = re.compile(r"^/([A-Za-z0-9._~-]+/)*$")
_SIZE = re.compile(r"^[0-9]{1,9}[kKmMgG]?$")
_CONF_PATH = re.compile(r"^/[A-Za-z0-9._/@+-]+$")

# Header lines both hops send upstream. The edge states the public facts (X-Forwarded-*), the mesh hop
# passes them on unchanged; both upgrade WebSocket connections through their own `map`.
_UPGRADE = """    proxy_http_version 1.1;
    proxy_set_header Upgrade $http_upgrade;
    proxy_set_header Connection ${upgrade_var};
"""


# -- validation ------------------------------------------------------------------------------------
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


def validate_hostname(name: str) -> str:
    if not _HOSTNAME.match(name) or len(name) > 253:
        raise IngressRefused(f"ingress host name {name!r} is not a host name")
    return name.lower()


def validate_path_prefix(prefix: str) -> str:
    """`/` or `/segment/.../` (a trailing slash, so `/api/` never matches `/apiary`)."""
    if not _PATH_PREFIX.match(prefix):
        raise IngressRefused(f"ingress path prefix {prefix!r} must look like /segment/"
                             )
    return prefix


def validate_network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise IngressRefused(f"{value!r} is not an IP address or network") from None


def validate_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise IngressRefused(f"{port!r} is not a TCP port")
    return port


def host_port(address: str, port: int) -> str:
    """`address:port` for nginx, IPv6 bracketed; the address must be an IP literal."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise IngressRefused(f"upstream address {address!r} must be an IP address, not a name") from None
    validate_port(port)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _conf_path(path: str, what: str) -> str:
    if not _CONF_PATH.match(path):
        raise IngressRefused(f"{what} {path!r} must be an absolute path without spaces or quotes")
    return path


# -- the mesh hop (agent) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class MeshHop:
    """The agent's proxy: where it listens on the mesh and whom it accepts plain HTTP from."""

    listen: str
    allow: tuple[str, ...]

    def __post_init__(self) -> None:
        validate_listen(self.listen)
        if not self.allow:
            raise IngressRefused("the mesh proxy needs the mesh range or the edge address to accept from")
        for item in self.allow:
            validate_network(item)


def _allow_lines(allow: Iterable[str]) -> str:
    return "".join(f"    allow {validate_network(item)};\n" for item in allow) + "    deny all;\n"


def render_mesh_default(hop: MeshHop) -> str:
    """The mesh listener's catch-all: an unknown host is misdirected (421), never another workload, and only
    for the mesh range and the edge; anyone else is refused (403) whatever host it names.

    nginx runs ``return`` in its rewrite phase, before the access phase where ``allow``/``deny`` act, so a
    ``deny`` beside ``return 421`` never fires: the source is checked in the rewrite phase too (``geo``, then
    ``if``), before the 421."""
    sources = "".join(f"    {validate_network(item)} 1;\n" for item in hop.allow)
    return (
        "# managed by forest-agent: the mesh proxy's default server\n"
        "map $http_upgrade $forest_mesh_upgrade {\n    default upgrade;\n    '' '';\n}\n"
        f"geo $forest_mesh_source {{\n    default 0;\n{sources}}}\n"
        "server {\n"
        f"    listen {validate_listen(hop.listen)} default_server;\n"
        "    server_name _;\n"
        f"{_allow_lines(hop.allow)}"
        "    if ($forest_mesh_source = 0) {\n        return 403;\n    }\n"
        "    return 421;\n"
        "}\n"
    )


def render_mesh_server(workload: str, hostnames: Iterable[str], path_prefix: str, port: int,
                       hop: MeshHop) -> str:
    names = [validate_hostname(name) for name in hostnames]
    if not names:
        raise IngressRefused(f"ingress for {workload} names no host")
    prefix = validate_path_prefix(path_prefix)
    upstream = host_port("127.0.0.1", port)
    return (
        f"# managed by forest-agent for workload {workload}; rewritten on every generation\n"
        "server {\n"
        f"    listen {validate_listen(hop.listen)};\n"
        f"    server_name {' '.join(names)};\n"
        f"{_allow_lines(hop.allow)}"
        f"    location {prefix} {{\n"
        f"        proxy_pass http://{upstream};\n"
        + _indent(_UPGRADE.replace("${upgrade_var}", "$forest_mesh_upgrade"))
        + "        proxy_set_header Host $host;\n"
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "        proxy_set_header X-Forwarded-Proto $http_x_forwarded_proto;\n"
        "        proxy_set_header X-Forwarded-Host $http_x_forwarded_host;\n"
        "    }\n"
        + ("" if prefix == "/" else "    location / {\n        return 404;\n    }\n")
        + "}\n"
    )


# -- the public edge (Host) --------------------------------------------------------------------------
@dataclass(frozen=True)
class EdgeSettings:
    """The edge's fixed configuration (Host settings `FOREST_EDGE_*`)."""

    http_listen: str = "80"
    https_listen: str = "443"
    https_port: int = 443
    hsts_max_age_s: int = 31536000
    client_max_body_size: str = "10m"
    connect_timeout_s: int = 5
    read_timeout_s: int = 60
    send_timeout_s: int = 60
    proxy_bind: str | None = None

    def __post_init__(self) -> None:
        validate_listen(self.http_listen)
        validate_listen(self.https_listen)
        validate_port(self.https_port)
        if not _SIZE.match(self.client_max_body_size):
            raise IngressRefused(f"body size limit {self.client_max_body_size!r} is not an nginx size (10m)")
        for value in (self.hsts_max_age_s, self.connect_timeout_s, self.read_timeout_s, self.send_timeout_s):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise IngressRefused(f"{value!r} is not a whole number of seconds")
        if self.proxy_bind is not None:
            host_port(self.proxy_bind, 1)


@dataclass(frozen=True)
class EdgeRoute:
    """One public hostname served by the edge: TLS here, plain HTTP to `upstream` on the mesh."""

    hostname: str
    path_prefix: str
    upstream_address: str
    upstream_port: int
    certificate: str
    certificate_key: str
    comment: str = field(default="", compare=False)


def render_edge_header(edge: EdgeSettings) -> str:
    """What the edge serves whatever the routes: the upgrade map and the catch-alls for unknown hosts
    (plain HTTP: 404; TLS: the handshake is refused for an unknown name, 421 for a known name carrying
    another Host header)."""
    return (
        "# managed by Forest's edge (manage.py forest_edge); rewritten on every render\n"
        "map $http_upgrade $forest_edge_upgrade {\n    default upgrade;\n    '' close;\n}\n"
        "server {\n"
        f"    listen {validate_listen(edge.http_listen)} default_server;\n"
        "    server_name _;\n"
        "    return 404;\n"
        "}\n"
        "server {\n"
        f"    listen {validate_listen(edge.https_listen)} ssl default_server;\n"
        "    server_name _;\n"
        "    ssl_reject_handshake on;\n"
        "    return 421;\n"
        "}\n"
    )


def render_edge_route(route: EdgeRoute, edge: EdgeSettings) -> str:
    hostname = validate_hostname(route.hostname)
    prefix = validate_path_prefix(route.path_prefix)
    upstream = host_port(route.upstream_address, route.upstream_port)
    redirect_port = "" if edge.https_port == 443 else f":{edge.https_port}"
    bind = ""
    if edge.proxy_bind:
        bind = f"        proxy_bind {host_port(edge.proxy_bind, 1).rsplit(':', 1)[0]};\n"
    comment = re.sub(r"[^A-Za-z0-9 ._:/@#-]", "", route.comment)[:200]
    return (
        f"# route {hostname}{prefix} -> {upstream} ({comment})\n"
        "server {\n"
        f"    listen {validate_listen(edge.http_listen)};\n"
        f"    server_name {hostname};\n"
        f"    return 308 https://$host{redirect_port}$request_uri;\n"
        "}\n"
        "server {\n"
        f"    listen {validate_listen(edge.https_listen)} ssl;\n"
        f"    server_name {hostname};\n"
        f"    ssl_certificate {_conf_path(route.certificate, 'certificate')};\n"
        f"    ssl_certificate_key {_conf_path(route.certificate_key, 'certificate key')};\n"
        "    ssl_protocols TLSv1.2 TLSv1.3;\n"
        f'    add_header Strict-Transport-Security "max-age={edge.hsts_max_age_s}" always;\n'
        f"    client_max_body_size {edge.client_max_body_size};\n"
        f"    location {prefix} {{\n"
        f"        proxy_pass http://{upstream};\n"
        + _indent(_UPGRADE.replace("${upgrade_var}", "$forest_edge_upgrade"))
        + "        proxy_set_header Host $host;\n"
        "        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "        proxy_set_header X-Forwarded-Proto $scheme;\n"
        "        proxy_set_header X-Forwarded-Host $host;\n"
        f"        proxy_connect_timeout {edge.connect_timeout_s}s;\n"
        f"        proxy_read_timeout {edge.read_timeout_s}s;\n"
        f"        proxy_send_timeout {edge.send_timeout_s}s;\n"
        f"{bind}"
        "    }\n"
        + ("" if prefix == "/" else "    location / {\n        return 404;\n    }\n")
        + "}\n"
    )


def _indent(text: str) -> str:
    return "".join(f"    {line}\n" for line in text.splitlines())


# -- applying a config -------------------------------------------------------------------------------
@dataclass(frozen=True)
class NginxCommand:
    """How to reach the nginx instance whose config includes the managed files."""

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


class NginxConfigFiles:
    """Managed files in one directory nginx includes: every change is tested and reloaded, and a
    rejected change leaves the previous files in place."""

    def __init__(self, conf_dir: Path, command: NginxCommand, runner: CommandRunner | None = None) -> None:
        self.conf_dir = conf_dir
        self.command = command
        self.runner = runner or CommandRunner()

    def install(self, path: Path, text: str | None, what: str) -> bool:
        """Write (`text`) or remove (`None`) one file, then test and reload; False when unchanged.
        Raises IngressRefused (the previous file back in place) when nginx refuses the result."""
        old = path.read_text() if path.exists() else None
        if old == text:
            return False
        if text is None:
            path.unlink()
        else:
            write_atomic(path, text)
        try:
            self.test(what)
            self.reload(what)
        except IngressRefused:
            _restore(path, old)
            raise
        return True

    def test(self, what: str) -> None:
        result = self.runner.run(self.command.argv("-t"), timeout_s=30.0)
        if result is None or result.returncode != 0:
            detail = first_error(result.stderr if result else "nginx binary not found")
            raise IngressRefused(f"nginx -t rejected the config for {what}; previous config kept: {detail}",
                                 code="ingress_config_rejected")

    def reload(self, what: str) -> None:
        result = self.runner.run(self.command.argv("-s", "reload"), timeout_s=30.0)
        if result is None or result.returncode != 0:
            detail = first_error(result.stderr if result else "nginx binary not found")
            raise IngressRefused(f"nginx reload failed for {what}; previous config restored: {detail}",
                                 code="ingress_reload_failed")

    def install_sections(self, path: Path, header: str,
                         sections: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """Install one file made of a header and named sections (the edge: one section per route).

        When nginx accepts the whole file, every section is installed. When it refuses, the file goes
        back to what it held (sections gone since are dropped) and each new or changed section is tried
        alone on top of what nginx accepted, so one broken route (a missing certificate) never holds back
        the others, and a changed route whose new form fails keeps serving its previous form. Returns
        (the sections now installed, {name: nginx's error} for the refused ones).
        """
        try:
            self.install(path, join_sections(header, sections), "the edge")
            return dict(sections), {}
        except IngressRefused as whole:
            if whole.code == "ingress_reload_failed":
                previous = read_sections(path)
                changed = [name for name in sections if previous.get(name) != sections[name]]
                return previous, dict.fromkeys(changed, whole.message)
        previous = read_sections(path)
        accepted = {name: body for name, body in previous.items() if name in sections}
        with contextlib.suppress(IngressRefused):
            self.install(path, join_sections(header, accepted), "the edge")
        accepted = read_sections(path)
        errors: dict[str, str] = {}
        for name in sorted(sections):
            if accepted.get(name) == sections[name]:
                continue
            candidate = {**accepted, name: sections[name]}
            try:
                self.install(path, join_sections(header, candidate), name)
                accepted = candidate
            except IngressRefused as exc:
                errors[name] = exc.message
        return accepted, errors


_SECTION = "# forest-section "


def join_sections(header: str, sections: Mapping[str, str]) -> str:
    return header + "".join(f"{_SECTION}{name}\n{sections[name]}" for name in sorted(sections))


def read_sections(path: Path) -> dict[str, str]:
    """The named sections of a file written by `join_sections` (empty when there is no file)."""
    if not path.exists():
        return {}
    sections: dict[str, str] = {}
    name = None
    for line in path.read_text().splitlines(keepends=True):
        if line.startswith(_SECTION):
            name = line[len(_SECTION):].strip()
            sections[name] = ""
        elif name is not None:
            sections[name] += line
    return sections


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A temp name nginx's `*.conf` include does not match, so a half-written file is never loaded.
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _restore(path: Path, old: str | None) -> None:
    if old is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    else:
        write_atomic(path, old)


def first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "[emerg]" in line or "[error]" in line:
            return line.strip()
    lines = stderr.strip().splitlines()
    return lines[0] if lines else "no detail"
