"""The README's *Trying it on one machine* ingress recipe, run as written: its shell lines go through bash
(``.venv/bin/`` pointing at this environment's scripts), the ``forest`` CLI makes the key pair and publishes
``examples/ingress/shop`` through Host's upload API, curl applies the README's workload body, and the last
curl reaches the workload over HTTPS through both hops — Debian's real nginx at the edge and the real
``forest-agent``'s nginx — as tests/e2e/test_native_ingress.py does.

What the test stands in for, and only that: the lines that run ``.venv/bin/python`` (``make run``'s own
settings: the flag, the dev certificate, the API token, ``FOREST_HOST`` and the local Grove's name) are done
by fixtures (a live server, a test CA at ``var/edge/dev-ca/ca.pem``, a staff token, the enrolled Grove);
``make run``'s edge loop is one ``edge_pass``; ports 8080 and 8443 become free ones. The mesh is loopback
addresses of its own, as in the ingress test.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from apps.flags.services import flag_override_set
from apps.groves.models import Grove
from apps.ingress import services as ingress
from apps.ingress.devtls import CertificateAuthority
from apps.workloads.models import WorkloadGeneration
from tests.console import console_script
from tests.e2e.test_native_ingress import EDGE_SOURCE, MESH_ADDRESS, MESH_RANGE, curl
from tests.e2e.test_native_workload import free_port
from tests.factories import api_token_for
from tests.ingress.nginx import NginxProcess
from tests.pipelines.conftest import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SHOP = "shop.forest.localhost"
SCRIPTS = str(Path(console_script("forest")).parent) + "/"


def recipe() -> tuple[str, str, list[str]]:
    """(keygen line, make run line, the marked block's lines) from README.md."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- ingress-recipe:begin[^>]*-->\n```sh\n(.*?)```\n<!-- ingress-recipe:end -->", readme, re.S)
    assert block, "README.md lost its marked ingress recipe"
    lines = block.group(1).splitlines()
    keygen = next(line for line in readme.splitlines() if line.startswith(".venv/bin/forest bundles keygen"))
    make_run = next(line for line in readme.splitlines() if line.endswith(" make run") and "TRUSTED_KEY" in line)
    return keygen, make_run, lines


def bash(script: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def edge(settings, tmp_path):
    """Host's ingress settings for forest.localhost, the edge's nginx and the agent's, and a CA where
    `forest_edge --dev-cert` puts its one (var/edge/dev-ca/ca.pem of the recipe's checkout)."""
    work = tmp_path / "checkout"
    shutil.copytree(ROOT / "examples" / "ingress", work / "examples" / "ingress")
    ca = CertificateAuthority(work / "var" / "edge" / "dev-ca")
    ca.issue(SHOP, tmp_path / "tls" / f"{SHOP}.crt", tmp_path / "tls" / f"{SHOP}.key")
    https, http = free_port(), free_port()
    settings.FOREST_MESH_NETWORKS = [MESH_RANGE]
    settings.FOREST_INGRESS_DOMAINS = ["forest.localhost"]
    settings.FOREST_EDGE_CERT_PATH = str(tmp_path / "tls" / "{hostname}.crt")
    settings.FOREST_EDGE_KEY_PATH = str(tmp_path / "tls" / "{hostname}.key")
    settings.FOREST_EDGE_HTTPS_LISTEN, settings.FOREST_EDGE_HTTPS_PORT = f"127.0.0.1:{https}", https
    settings.FOREST_EDGE_HTTP_LISTEN = f"127.0.0.1:{http}"
    settings.FOREST_EDGE_PROXY_BIND = EDGE_SOURCE
    settings.FOREST_NATIVE_WORKLOAD_DISPATCH = True
    edge, hop = NginxProcess(tmp_path / "edge").start(), NginxProcess(tmp_path / "hop").start()
    settings.FOREST_EDGE_CONF_DIR = edge.conf_dir
    yield {"work": work, "ca": ca.pem, "https": https, "edge": edge, "hop": hop}
    edge.stop()
    hop.stop()


def test_the_readmes_ingress_recipe_runs_as_written(live_server, enrolled, agents, staff_user, settings, edge):
    grove, state_dir = enrolled
    work, hop = edge["work"], edge["hop"]
    keygen, make_run, lines = recipe()
    settings.FOREST_PUBLIC_URL = live_server.url
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "FOREST_ENV_FILE": "",
           "FOREST_TOKEN": api_token_for(staff_user, "ingress-recipe"), "FOREST_HOST": live_server.url,
           "GROVE": grove.slug}

    # The key pair, as the README makes it; the agent trusts the public half, as its `make run` line says.
    made = bash(keygen.replace(".venv/bin/", SCRIPTS), cwd=work, env=env)
    assert made.returncode == 0, made.stderr
    assert "FOREST_LOCAL_AGENT_TRUSTED_KEY=release=$PWD/release.pem" in make_run
    flag_override_set(name="host.deploy.native_ingress", enabled=True, reason="e2e")
    proxy_port, app_port = free_port(), free_port()
    agent = agents(state_dir, "--enable-native-workloads", "--trusted-key", f"release={work / 'release.pem'}",
                   "--nginx-conf-dir", str(hop.conf_dir), "--nginx-binary", hop.command.binary,
                   "--nginx-config", str(hop.main), "--nginx-prefix", str(hop.root),
                   "--mesh-address", MESH_ADDRESS, "--proxy-port", str(proxy_port), "--mesh-allow", MESH_RANGE)
    try:
        wait_for(lambda: Grove.objects.filter(pk=grove.pk, mesh_address=MESH_ADDRESS).exists(),
                 what=f"the Grove's mesh address {agent.output()}")
        script = "\n".join(lines).replace("8080", str(app_port)).replace("8443", str(edge["https"]))
        # make run's own settings (the `.venv/bin/python` lines) are this test's fixtures and env.
        kept = [line for line in script.splitlines() if ".venv/bin/python" not in line]
        assert len(kept) == len(lines) - 5, "the recipe's steps changed: update this test's stand-ins"
        *apply, list_routes, fetch = [line.replace(".venv/bin/", SCRIPTS) for line in kept]
        applied = bash("\n".join(apply), cwd=work, env=env)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        assert '"slug":"shop"' in applied.stdout.replace(" ", "")

        generation = wait_for(lambda: WorkloadGeneration.objects.filter(workload__slug="shop", state="live").first(),
                              timeout=60, what=f"the shop generation to be live {agent.output()}")
        assert generation.grove_id == grove.pk
        assert ingress.edge_pass(files=edge["edge"].files()).serving == [SHOP]  # make run's edge loop, once
        routes = bash(list_routes, cwd=work, env={**env, "COLUMNS": "200"})
        assert routes.returncode == 0 and SHOP in routes.stdout and "serving" in routes.stdout, routes.stdout

        def answered():
            result = bash(fetch, cwd=work, env=env)
            return result.stdout if result.returncode == 0 else None

        assert wait_for(answered, what="the recipe's last curl") == "hello from shop (https)\n"
        assert curl(f"https://{SHOP}:{edge['https']}/", resolve=f"{SHOP}:{edge['https']}:127.0.0.1",
                    ca=edge["ca"])[0] == 200
    finally:
        agent.stop()
