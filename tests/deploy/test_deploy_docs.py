"""docs/deploy.md can be followed as written: every command in its `sh` blocks, in order, either runs here
(the management commands against the real test PostgreSQL, the settings file, the Python one-liner, the
backup and the restore) or is rendered and checked (helm against the charts and their schemas, kubectl
against the namespaces, Secrets and objects the earlier commands made, docker against the build files,
forest and forest-agent against their own CLIs). A command of any other kind fails the test, so the file
cannot grow one nobody checks. And docs/examples/forest.env.example is every setting Host reads, loadable
by Django as it stands.

What is faked: the cluster, the registry and Docker (there are none here); a command that needs one is
checked against what it would act on, not run.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import helm_python as helm
import httpx
import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from forest_agent.kube.validate import KUBERNETES_VERSION, schema_validate

from apps.flags import registry
from apps.pipelines.rules import node_requirement
from apps.placement import services as placement
from tests.artifacts.conftest import free_port, stop, wait_until_up
from tests.console import console_script
from tests.deploy.chart import CHARTS, REPO, render_objects
from tests.deploy.host_settings import settings_host_reads
from tests.deploy.test_images import DOCKERFILES
from tests.factories import api_token_for
from tests.placement.conftest import grove_make

DEPLOY = REPO / "docs" / "deploy.md"
EXAMPLE = REPO / "docs" / "examples" / "forest.env.example"
RESTORE_TOOLS = ("pg_dump", "dropdb", "createdb", "pg_restore")
ENTRYPOINT_ROLES = ("web", "worker", "beat", "runner", "migrate", "edge", "manage")
DIGEST = "@sha256:" + "ab" * 32


def doc_commands() -> list[str]:
    """Every command line of deploy.md's `sh` blocks, in order (continuations joined, comments dropped)."""
    commands = []
    for block in re.findall(r"^( *)```sh\n(.*?)^\1```", DEPLOY.read_text(), re.MULTILINE | re.DOTALL):
        for line in re.sub(r"\\\n\s*", " ", textwrap.dedent(block[1])).splitlines():
            if line.strip() and not line.strip().startswith("#"):
                commands.append(line.strip())
    return commands


def example_settings() -> tuple[dict[str, str], set[str]]:
    """(the lines set, the names shown commented out with their default)."""
    active: dict[str, str] = {}
    commented: set[str] = set()
    for line in EXAMPLE.read_text().splitlines():
        if match := re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line):
            active[match.group(1)] = match.group(2)
        elif match := re.match(r"^# ([A-Z][A-Z0-9_]*)=", line):
            commented.add(match.group(1))
    return active, commented


# -- the example environment file --------------------------------------------------------------------------
def test_the_example_environment_file_is_every_setting_host_reads():
    active, commented = example_settings()
    assert not set(active) & commented, "a setting is both set and shown as a default"
    listed = set(active) | commented
    read = settings_host_reads()
    assert read - listed == set(), "settings Host reads that the example leaves out"
    assert listed - read == set(), "names in the example that Host never reads (misspelt?)"
    assert {"SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "ALLOWED_HOSTS", "FOREST_PUBLIC_URL",
            "CSRF_TRUSTED_ORIGINS", "FOREST_METRICS_TOKEN"} <= set(active), "the required ones are set"


def test_the_example_loads_the_same_through_docker_and_kubectl():
    """Both loaders take `NAME=value` literally: a quote or a space around '=' would end up in the value."""
    for line in EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#"):
            assert re.fullmatch(r"[A-Z][A-Z0-9_]*=[^\s'\"]*", line), line


def test_the_example_as_written_passes_djangos_deployment_checks(tmp_path):
    active, _ = example_settings()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FOREST_VAR_DIR": str(tmp_path), **active}
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "ERROR"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    # Django's deployment checks (HSTS, secure cookies, SSL redirect, the key's strength) all pass as written;
    # drf_spectacular's schema-naming warnings are about the API schema, not the settings.
    assert "(security." not in result.stdout + result.stderr, result.stdout + result.stderr


# -- the walkthrough ---------------------------------------------------------------------------------------
class Walk:
    """What the commands so far made: files, namespaces, Secrets, releases and their objects, variables."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.files: set[str] = set()
        self.tags: set[str] = set()
        self.namespaces: set[str] = set()
        self.secrets: set[tuple[str, str]] = set()
        self.releases: dict[tuple[str, str], dict[str, Any]] = {}
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.variables = {"TOKEN": "fe_enroll_0123456789abcdef", "API_TOKEN": "placeholder"}
        self.ran: list[str] = []
        self.checked: list[str] = []
        self.restore: list[str] = []
        self.pending: list[str] = []

    def expand(self, line: str) -> str:
        def value(match: re.Match[str]) -> str:
            assert match.group(1) in self.variables or match.group(1) in RESTORE_VARIABLES, match.group(0)
            return self.variables.get(match.group(1), match.group(0))
        return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", value, line)

    def deployments(self, namespace: str) -> dict[str, dict[str, Any]]:
        return {obj["metadata"]["name"]: obj for obj in self.objects.get(namespace, [])
                if obj["kind"] == "Deployment"}


RESTORE_VARIABLES = ("DATABASE_URL", "ADMIN_DATABASE_URL", "FOREST_DB", "FOREST_DB_OWNER")


def _docker(walk: Walk, argv: list[str]) -> None:
    action, args = argv[1], argv[2:]
    if action == "build":
        dockerfile, tag = args[args.index("-f") + 1], args[args.index("-t") + 1]
        assert REPO / dockerfile in DOCKERFILES.values() and args[-1] == ".", argv
        walk.tags.add(tag)
    elif action in ("push", "inspect"):
        assert args[-1] in walk.tags, f"{args[-1]} was not built above"
    elif action == "run":
        assert args[:3] == ["--rm", "--env-file", "forest.env"] and "forest.env" in walk.files, argv
        image, role, *rest = args[3:]
        assert DIGEST in image, "deploy by digest"
        assert role in ENTRYPOINT_ROLES, role
        if role == "manage":
            _manage(walk, rest)
        elif role == "migrate":
            call_command("migrate", "--check", stdout=io.StringIO())
    else:
        pytest.fail(f"unchecked docker command: {argv}")


def _manage(walk: Walk, args: list[str], stdin: str | None = None) -> str:
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin) if stdin is not None else saved
    try:
        call_command(*args, stdout=out)
    finally:
        sys.stdin = saved
    text = out.getvalue()
    if args[0] == "create_enrollment_token":
        walk.variables["TOKEN"] = text.strip().splitlines()[-1]
    if args[:2] == ["api_token", "create"]:
        walk.variables["API_TOKEN"] = re.findall(r"\S{20,}", text)[-1]
    return text


def _kubectl(walk: Walk, argv: list[str]) -> None:
    args = argv[1:]
    namespace = ""
    if args[0] == "-n":
        namespace, args = args[1], args[2:]
        assert namespace in walk.namespaces, f"namespace {namespace} is not created above"
    if args[:2] == ["create", "namespace"]:
        walk.namespaces.add(args[2])
    elif args[:3] == ["create", "secret", "generic"]:
        name, *sources = args[3:]
        for source in sources:
            kind, _, value = source.partition("=")
            assert kind in ("--from-env-file", "--from-literal"), source
            if kind == "--from-env-file":
                assert value in walk.files, f"{value} is not written above"
        walk.secrets.add((namespace, name))
    elif args[:2] == ["rollout", "status"]:
        kind, _, name = args[2].partition("/")
        assert kind in ("deployment", "deploy") and name in walk.deployments(namespace), args
    elif args[0] == "exec":
        stdin_file = None
        if "<" in args:
            stdin_file, args = args[args.index("<") + 1], args[:args.index("<")]
        options, command = args[1:args.index("--")], args[args.index("--") + 1:]
        target = next(option for option in options if "/" in option)
        assert target.split("/")[0] in ("deploy", "deployment") and target.split("/")[1] in walk.deployments(
            namespace), target
        assert ("-i" in options) == (stdin_file is not None), "stdin reaches the pod only with -i"
        pod = walk.deployments(namespace)[target.split("/")[1]]["spec"]["template"]["spec"]
        assert command[:2] == ["python", "manage.py"], command
        assert pod["containers"][0]["args"] == ["web"], "management commands run in a web pod (the app's cwd)"
        stdin = (walk.workdir / stdin_file).read_text() if stdin_file else None
        _manage(walk, command[2:], stdin)
        walk.ran.append(" ".join(command))
        return
    elif args[0] == "scale":
        selector = args[args.index("--selector") + 1]
        key, _, value = selector.partition("=")
        scaled = [d for d in walk.deployments(namespace).values() if d["metadata"]["labels"].get(key) == value]
        assert len(scaled) == len(walk.deployments(namespace)) > 0, selector
        assert args[1] == "deployment" and "--replicas=0" in args
    else:
        pytest.fail(f"unchecked kubectl command: {argv}")
    walk.checked.append(" ".join(argv))


def _helm(walk: Walk, argv: list[str]) -> None:
    action, release, chart, *args = argv[1:]
    assert action in ("install", "upgrade"), argv
    assert chart.startswith("./charts/") and (REPO / chart).is_dir(), chart
    values: dict[str, Any] = {}
    namespace = ""
    index = 0
    while index < len(args):
        flag = args[index]
        if flag == "-n":
            namespace, index = args[index + 1], index + 2
        elif flag == "--set":
            _merge(values, helm.parse_set_string(args[index + 1]))
            index += 2
        elif flag == "--timeout":
            assert re.fullmatch(r"\d+[smh]", args[index + 1])
            index += 2
        elif flag in ("--wait", "--reuse-values"):
            index += 1
        else:
            pytest.fail(f"unchecked helm flag {flag} in {argv}")
    assert namespace in walk.namespaces, namespace
    if action == "upgrade":
        assert (release, namespace) in walk.releases, f"upgrade of {release} before its install"
        assert "--reuse-values" in args, "an upgrade that does not reuse the values would reset them"
        values = _merge(dict(walk.releases[(release, namespace)]), values)
    for key in ("existingSecret", "enrollmentSecret"):
        if values.get(key):
            assert (namespace, values[key]) in walk.secrets, f"Secret {values[key]} is not created in {namespace}"
    objects = render_objects(values, CHARTS / chart.removeprefix("./charts/"), release=release, namespace=namespace,
                             is_upgrade=action == "upgrade")
    for obj in objects:
        schema_validate(obj, version=KUBERNETES_VERSION)
    walk.releases[(release, namespace)] = values
    walk.objects[namespace] = [o for o in walk.objects.get(namespace, []) if
                               o["metadata"].get("labels", {}).get("app.kubernetes.io/instance") != release] + objects
    walk.checked.append(" ".join(argv))


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = _merge(dict(into[key]), value)
        else:
            into[key] = value
    return into


def _cli(walk: Walk, argv: list[str]) -> None:
    """forest-agent: its own parser accepts the arguments. forest: the CLI parses them and then tries Host at
    an address where nothing listens, so it fails to connect instead of acting."""
    if argv[0] == "forest-agent":
        from forest_agent.cli import build_parser

        parser = build_parser()
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        if argv[1] not in commands and argv[1] == "install":
            walk.pending.append(" ".join(argv))  # issue 38 item 1 adds it; parsed here once it exists
            return
        parser.parse_args(argv[1:])  # SystemExit(2) on anything it does not take
    else:
        env = {**os.environ, "FOREST_HOST": f"http://127.0.0.1:{free_port()}", "FOREST_TOKEN": "x" * 20}
        result = subprocess.run([console_script(argv[0]), *argv[1:]], cwd=walk.workdir, env=env, capture_output=True,
                                text=True, timeout=120, check=False)
        assert "[host_unreachable]" in result.stderr, result.stderr  # parsed, then refused by the network only
    walk.checked.append(" ".join(argv))


def _run(walk: Walk, line: str) -> None:
    if assignment := re.fullmatch(r"([A-Z_][A-Z0-9_]*)=\$\((.*)\)", line):
        name, inner = assignment.groups()
        _docker(walk, shlex.split(inner))
        tag = shlex.split(inner)[-1]
        walk.variables[name] = tag.rsplit(":", 1)[0] + DIGEST
        return
    argv = shlex.split(walk.expand(line))
    program = argv[0]
    if program == "docker":
        _docker(walk, argv)
    elif program == "cp":
        source, target = argv[1:]
        shutil.copy(REPO / source, walk.workdir / target)
        walk.files.add(target)
    elif program == "python3":
        result = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, timeout=60, check=True)
        assert len(result.stdout.strip()) >= 50, "a SECRET_KEY of 50 or more characters"
    elif program == "kubectl":
        _kubectl(walk, argv)
    elif program == "helm":
        _helm(walk, argv)
    elif program == "export":
        for pair in argv[1:]:
            name, _, value = pair.partition("=")
            walk.variables[name] = value
    elif program in ("forest", "forest-agent"):
        _cli(walk, argv)
    elif program in RESTORE_TOOLS:
        walk.restore.append(line)  # run by test_the_restore_procedure_serves_the_same_decisions
    else:
        pytest.fail(f"docs/deploy.md has a command no test checks: {line}")


@pytest.mark.django_db(transaction=True)
def test_every_command_in_deploy_md_runs_or_renders_in_order(tmp_path):
    from django.contrib.auth import get_user_model

    walk = Walk(tmp_path)
    (tmp_path / "admin-password.txt").write_text("a-long-admin-password-for-the-test\n")
    commands = doc_commands()
    assert len(commands) > 20
    for line in commands:
        _run(walk, line)
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_staff and admin.check_password("a-long-admin-password-for-the-test")
    assert {("forest-host", "forest"), ("forest-controller", "forest-system")} <= set(walk.releases)
    assert [line.split()[0] for line in walk.restore] == ["pg_dump", "dropdb", "createdb", "pg_restore"]
    assert all("forest-agent install" in line for line in walk.pending), walk.pending
    # shadow mode first: enforcement is turned on only after the first job was submitted
    flag_sets = [i for i, line in enumerate(commands) if "flags set" in line]
    enforce = next(i for i in flag_sets if registry.FOREST_COMPATIBILITY in commands[i])
    first_job = next(i for i, line in enumerate(commands) if line.startswith("forest compute submit"))
    assert first_job < enforce and all(i < first_job for i in flag_sets if i != enforce)


def test_the_flag_order_names_every_declared_flag():
    section = DEPLOY.read_text().split("**5. Flags, shadow mode first.**", 1)[1].split("**6.", 1)[0]
    rows = re.findall(r"^\| [^|]+ \| `([a-z_.]+)` \|", section, re.MULTILINE)
    assert sorted(rows) == sorted(registry.FLAGS), "every declared flag has its row, once"


# -- backups and a restore ---------------------------------------------------------------------------------
def _psql(database_url: str, sql: str) -> None:
    subprocess.run(["psql", "--no-psqlrc", "--quiet", "--set", "ON_ERROR_STOP=1", database_url, "-c", sql],
                   capture_output=True, text=True, timeout=60, check=True)


def node(platform: str = "linux/amd64"):
    return node_requirement({"id": "n", "kind": "exec", "platform": [platform]}, run_kind="build")


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_the_restore_procedure_serves_the_same_decisions(tmp_path, staff_user):
    """Decisions written, dumped with the doc's pg_dump line, a database replaced with the doc's dropdb,
    createdb and pg_restore lines, and a web started on it answers the placements API exactly as before."""
    grove_make("amd")
    for index in range(3):
        placement.place_execution(subject_type="pipeline_node", subject_id=str(index), requirement=node())
    placement.place_execution(subject_type="compute_step", subject_id="c1", requirement=node("linux/arm64"))
    token = api_token_for(staff_user, "restore-check")
    headers = {"Authorization": f"Token {token}"}

    db = django_settings.DATABASES["default"]
    server = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    restored = f"{db['NAME']}_restore"  # this session's own: the test database's name plus a suffix
    assert restored.startswith(db["NAME"]) and restored != db["NAME"]
    lines = [line for line in doc_commands() if line.split()[0] in RESTORE_TOOLS]
    dump, replace = lines[0], lines[1:]
    assert dump.startswith("pg_dump")
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "timeout": 300, "check": False}
    result = subprocess.run(["bash", "-euc", dump], env={**os.environ, "DATABASE_URL": f"{server}/{db['NAME']}"},
                            **run)
    assert result.returncode == 0, result.stderr
    # What is there before the restore is dropped: a database of that name with something else in it.
    subprocess.run(["dropdb", "--force", "--if-exists", "--maintenance-db", f"{server}/postgres", restored],
                   capture_output=True, timeout=60, check=True)
    subprocess.run(["createdb", "--maintenance-db", f"{server}/postgres", restored], capture_output=True,
                   timeout=60, check=True)
    _psql(f"{server}/{restored}", "CREATE TABLE stale_marker (id int)")
    env = {**os.environ, "DATABASE_URL": f"{server}/{restored}", "ADMIN_DATABASE_URL": f"{server}/postgres",
           "FOREST_DB": restored, "FOREST_DB_OWNER": db["USER"]}
    web = None
    try:
        for line in replace:
            result = subprocess.run(["bash", "-euc", line], env=env, **run)
            assert result.returncode == 0, f"{line}\n{result.stderr}"
        port = free_port()
        log = tmp_path / "web.log"
        web_env = {**os.environ, "DATABASE_URL": f"{server}/{restored}", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0",
                   "ALLOWED_HOSTS": "127.0.0.1,localhost", "LOG_LEVEL": "WARNING"}
        with open(log, "ab") as out:
            web = subprocess.Popen([console_script("uvicorn"), "forest_host.asgi:application", "--host", "127.0.0.1",
                                    "--port", str(port), "--no-access-log"], cwd=REPO, env=web_env, stdout=out,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        wait_until_up(f"http://127.0.0.1:{port}/healthz", web, log)
        from rest_framework.test import APIClient

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=headers["Authorization"])
        for query in ({"page_size": 100}, {"would_refuse": "true"}, {"subject_type": "compute_step"}):
            before = client.get("/api/forest/v1/placements", query).json()
            after = httpx.get(f"http://127.0.0.1:{port}/api/forest/v1/placements", params=query, headers=headers,
                              timeout=30).json()
            assert after == before and before["count"] > 0
        tables = subprocess.run(["psql", "--no-psqlrc", "-Atc", "SELECT to_regclass('stale_marker') IS NULL",
                                 f"{server}/{restored}"], capture_output=True, text=True, timeout=60, check=True)
        assert tables.stdout.strip() == "t", "the restore replaced the database, it did not merge into it"
    finally:
        if web is not None:
            stop(web)
        subprocess.run(["dropdb", "--force", "--if-exists", "--maintenance-db", f"{server}/postgres", restored],
                       capture_output=True, timeout=60, check=False)


def test_the_changelog_starts_with_unreleased_in_keep_a_changelog_sections():
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert releases[0] == "[Unreleased]"
    assert all(re.fullmatch(r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", r) for r in releases[1:]), releases
    sections = set(re.findall(r"^### (.+)$", text, re.MULTILINE))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security", "Upgrade notes"}, sections
    assert "CHANGELOG.md" in DEPLOY.read_text()
