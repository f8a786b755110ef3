"""``manage.py forest_edge``: Host's public ingress edge.

Each pass derives the routes, renders one nginx file (``FOREST_EDGE_CONF_DIR/forest-edge.conf``: TLS per
host name, HTTP -> HTTPS, HSTS, X-Forwarded-*, WebSocket upgrade, upstream = the Grove's mesh address and
proxy port), runs ``nginx -t``, reloads, keeps the previous file when nginx refuses, and records every
route's state (serving, pending, failed with nginx's error) for the API, CLI and staff page.

Production points it at the system nginx (``FOREST_EDGE_NGINX_CONFIG``/``_PREFIX``; that nginx includes
``FOREST_EDGE_CONF_DIR/*.conf`` in its ``http`` block). ``--serve`` runs a private nginx instead, as a
non-daemon child with its own prefix (``make run``), started once ``host.deploy.native_ingress`` is on.
"""
from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from forest_agent.nginx import NginxCommand, NginxConfigFiles, render_edge_header, write_atomic

from apps.ingress import rules, selectors, services
from apps.ingress.devtls import CertificateAuthority

log = logging.getLogger(__name__)


def serve_main_config(prefix: Path, conf_dir: Path) -> Path:
    """The private nginx's main file: everything under ``prefix``, the edge's directory included."""
    temp = "".join(f"    {kind}_temp_path {prefix}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi",
                                                                          "uwsgi", "scgi"))
    (prefix / "logs").mkdir(parents=True, exist_ok=True)
    main = prefix / "nginx.conf"
    write_atomic(main, f"pid {prefix}/nginx.pid;\nerror_log {prefix}/logs/error.log;\nworker_processes 1;\n"
                       f"events {{ worker_connections 1024; }}\nhttp {{\n    access_log off;\n{temp}"
                       f"    include {conf_dir}/*.conf;\n}}\n")
    return main


class Command(BaseCommand):
    help = "Render Host's public nginx edge from the native ingress routes, test, reload, report per route."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass, print each route's state, exit "
                            "(non-zero when a route failed)")
        parser.add_argument("--serve", action="store_true",
                            help="run a private nginx (non-daemon child, prefix FOREST_EDGE_NGINX_PREFIX or "
                                 "var/edge) once host.deploy.native_ingress is on")
        parser.add_argument("--interval", type=float, default=settings.FOREST_EDGE_INTERVAL_S,
                            help="seconds between passes (default FOREST_EDGE_INTERVAL_S)")
        parser.add_argument("--dev-cert", metavar="HOSTNAME", action="append", default=[],
                            help="DEBUG only: issue a certificate for HOSTNAME from a new local CA (written to "
                                 "FOREST_EDGE_CERT_PATH/KEY_PATH, the CA beside the edge's files) and exit")

    def handle(self, *args, **options):
        conf_dir = Path(settings.FOREST_EDGE_CONF_DIR)
        conf_dir.mkdir(parents=True, exist_ok=True)
        if options["dev_cert"]:
            return self._dev_certs(options["dev_cert"], conf_dir.parent)
        if options["once"]:
            return self._report(services.edge_pass())
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        child: subprocess.Popen | None = None
        files = services.edge_files()
        self._said_waiting = False
        try:
            while not stop.is_set():
                if options["serve"]:
                    child, files = self._serve(child, files, conf_dir)
                if not options["serve"] or child is not None:
                    self._pass(files)
                stop.wait(options["interval"])
        finally:
            if child is not None and child.poll() is None:
                child.terminate()
                child.wait(timeout=30)

    def _pass(self, files: NginxConfigFiles) -> None:
        try:
            result = services.edge_pass(files=files)
        except Exception:  # the edge keeps running (and nginx keeps its file) whatever one pass hit
            log.exception("edge pass failed")
            return
        log.info("edge pass", extra={"serving": len(result.serving), "failed": sorted(result.failed)})

    def _serve(self, child, files, conf_dir: Path):
        if child is not None and child.poll() is None:
            return child, files
        if child is not None:
            log.error("edge nginx exited (%s); starting it again", child.returncode)
        status = selectors.ingress_status()
        if not status["enabled"]:
            if not self._said_waiting:
                self.stderr.write(f"edge waiting: {status['reason']}")
                self._said_waiting = True
            return None, files
        prefix = Path(settings.FOREST_EDGE_NGINX_PREFIX or settings.VAR_DIR / "edge").resolve()
        main = serve_main_config(prefix, conf_dir.resolve())
        command = NginxCommand(binary=settings.FOREST_EDGE_NGINX_BINARY, main_config=main, prefix=prefix)
        files = NginxConfigFiles(conf_dir, command)
        edge_file = conf_dir / services.EDGE_FILE
        if not edge_file.exists():  # listening (and answering 404/421) from the start, before any route
            write_atomic(edge_file, render_edge_header(services.edge_settings()))
        (prefix / "nginx.pid").unlink(missing_ok=True)
        try:
            child = subprocess.Popen(command.argv("-g", "daemon off;"))
        except OSError as exc:
            log.error("cannot start the edge's nginx (%s): %s", settings.FOREST_EDGE_NGINX_BINARY, exc)
            return None, files
        # Reloads signal the pid nginx writes once it is up; the first render waits for it.
        deadline = time.monotonic() + 30
        while not (prefix / "nginx.pid").exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stderr.write(f"edge nginx serving {settings.FOREST_EDGE_HTTPS_LISTEN} (TLS) and "
                          f"{settings.FOREST_EDGE_HTTP_LISTEN}, prefix {prefix}")
        return child, files

    def _dev_certs(self, hostnames: list[str], directory: Path) -> None:
        if not settings.DEBUG:
            raise CommandError("--dev-cert is for make run (DEBUG): production certificates come from an ACME "
                               "client or the operator, at FOREST_EDGE_CERT_PATH")
        authority = CertificateAuthority(directory.resolve() / "dev-ca")
        for hostname in hostnames:
            cert, key = rules.certificate_paths(
                hostname, cert_template=settings.FOREST_EDGE_CERT_PATH, key_template=settings.FOREST_EDGE_KEY_PATH,
                wildcard_cert="", wildcard_key="")
            authority.issue(hostname, Path(cert), Path(key))
            self.stdout.write(f"{hostname}: {cert}")
        self.stdout.write(f"trust it with: curl --cacert {authority.pem} ...")

    def _report(self, result: services.EdgePassResult):
        for hostname in result.serving:
            self.stdout.write(f"serving  {hostname}")
        for hostname, error in sorted(result.failed.items()):
            self.stdout.write(f"failed   {hostname}: {error}")
        status = selectors.ingress_status()
        if not status["enabled"]:
            self.stdout.write(status["reason"])
        if result.failed:
            raise CommandError(f"{len(result.failed)} route(s) failed")
