"""The container build files (docker/*.Dockerfile): hadolint, pinned bases, non-root numeric users, no
compilers in the final stage, health documented, pins current, and the builder stage's install steps
**replayed** outside Docker.

No Docker engine runs on these machines and base images cannot be pulled, so the replay runs the builder
stage's own COPY, WORKDIR and RUN lines against a scratch root: container paths (/opt/venv, /app, /tmp,
/src) map into it, `python -m venv` makes a real fresh virtual environment, and each `pip install` gets
`--no-index` (nothing is downloaded at test time). The fresh environment sees this project's tested
environment through a .pth file, so every pinned requirement must be *exactly* a tested version or pip
fails; the controller's agent package is really built and installed into the fresh environment with the
pinned build tools (from the wheelhouse `make venv` fills), and then runs from there.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
HADOLINT = Path(sys.executable).with_name("hadolint")
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"
DOCKERFILES = {"host": DOCKER / "host.Dockerfile", "controller": DOCKER / "controller.Dockerfile"}
PINNED_BASE = re.compile(r"^[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}$")
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|make|build-essential|rustc|cargo|golang)\b")


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def stages(path: Path) -> list[Stage]:
    """FROM-separated stages as (INSTRUCTION, arguments), with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            parts = rest.split()
            found.append(Stage(parts[0], parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else None))
        else:
            found[-1].instructions.append((instruction, " ".join(rest.split())))
    return found


@pytest.mark.parametrize("image", DOCKERFILES)
def test_hadolint_is_clean(image):
    result = subprocess.run([str(HADOLINT), "--config", str(REPO / ".hadolint.yaml"), str(DOCKERFILES[image])],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\n")
    result = subprocess.run([str(HADOLINT), str(bad)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0 and "DL3007" in result.stdout  # `latest` refused


@pytest.mark.parametrize("image", DOCKERFILES)
def test_every_base_image_is_pinned_by_version_and_digest(image):
    names = set()
    for stage in stages(DOCKERFILES[image]):
        if stage.base not in names:
            assert PINNED_BASE.match(stage.base), stage.base
            assert ":latest@" not in stage.base
        if stage.name:
            names.add(stage.name)
    assert len(stages(DOCKERFILES[image])) >= 2, "multi-stage"


# What a final stage may install from Debian: only the Host image's nginx, which its `edge` process runs.
FINAL_STAGE_PACKAGES = {"host": {"nginx"}, "controller": set()}


def final_stage_packages(run: str) -> dict[str, str]:
    """Package -> pinned version of each `apt-get install` in a RUN line (recommends off, lists removed)."""
    packages: dict[str, str] = {}
    for command in re.findall(r"apt-get install([^&;]*)", run):
        assert "--no-install-recommends" in command, run
        for word in shlex.split(command):
            if not word.startswith("-"):
                name, _, version = word.partition("=")
                assert version, f"{name} is not pinned"
                packages[name] = version
    assert "rm -rf /var/lib/apt/lists/*" in run, run
    return packages


@pytest.mark.parametrize("image", DOCKERFILES)
def test_the_final_stage_runs_as_a_numeric_non_root_user_without_compilers(image):
    final = stages(DOCKERFILES[image])[-1]
    users = [args for instruction, args in final.instructions if instruction == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), users
    for instruction, args in final.instructions:
        if instruction == "RUN":
            assert "apk add" not in args and not COMPILERS.search(args), args
            if "apt-get install" in args:
                assert set(final_stage_packages(args)) == FINAL_STAGE_PACKAGES[image], args
        if instruction == "COPY" and "--from=" in args:
            assert args.split()[0].startswith("--from=builder")
    healthchecks = [args for instruction, args in final.instructions if instruction == "HEALTHCHECK"]
    assert healthchecks, "HEALTHCHECK is stated (NONE for a process without a probe, with the reason beside it)"
    if image == "host":
        assert "host-healthcheck.py" in healthchecks[0]
        assert any(instruction == "EXPOSE" and args == "8000" for instruction, args in final.instructions)


def test_the_host_image_starts_every_process_by_command():
    entrypoint = (DOCKER / "host-entrypoint.sh").read_text()
    for role in ("web", "worker", "beat", "runner", "migrate", "edge", "manage"):
        assert re.search(rf"^\s+{role}\)", entrypoint, re.MULTILINE), role
    for process in ("web", "worker", "beat", "runner"):  # the Procfile's processes, all of them
        assert re.search(rf"^{process}:", (REPO / "Procfile").read_text(), re.MULTILINE)
    shellcheck = shutil.which("shellcheck")
    if shellcheck:
        subprocess.run([shellcheck, str(DOCKER / "host-entrypoint.sh")], check=True, timeout=60)
    result = subprocess.run(["sh", str(DOCKER / "host-entrypoint.sh"), "nonsense"], capture_output=True, text=True,
                            timeout=30, check=False)
    assert result.returncode == 64 and "unknown process" in result.stderr


def test_the_host_image_has_the_nginx_its_edge_runs():
    """The `edge` process starts FOREST_EDGE_NGINX_BINARY (nginx): the final stage installs the Debian
    package that provides it, at the upstream version the ingress tests run both hops on here."""
    final = stages(DOCKERFILES["host"])[-1]
    runs = [args for instruction, args in final.instructions if instruction == "RUN" and "apt-get install" in args]
    assert runs, "the final stage installs nginx"
    (version,) = [final_stage_packages(run)["nginx"] for run in runs]
    assert "nginx -v" in runs[0], "the build fails at once when the package has no nginx"
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    owner = subprocess.run(["dpkg", "-S", nginx], capture_output=True, text=True, timeout=30, check=True).stdout
    assert owner.split(":", 1)[0] == "nginx", owner
    tested = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "nginx"], capture_output=True, text=True,
                            timeout=30, check=True).stdout
    assert fnmatch.fnmatch(tested, version), (tested, version)
    assert "edge)" in (DOCKER / "host-entrypoint.sh").read_text()


def test_the_dockerignore_keeps_local_state_and_secrets_out():
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert next(line for line in ignore if line and not line.startswith("#")) == "**"
    allowed = [line[1:] for line in ignore if line.startswith("!")]
    assert not [a for a in allowed if a.startswith((".venv", "var", ".git", "staticfiles"))]
    for stage in stages(DOCKERFILES["host"]) + stages(DOCKERFILES["controller"]):
        for instruction, args in stage.instructions:
            if instruction == "COPY" and "--from=" not in args:
                for source in args.split()[:-1]:
                    wanted = source.rstrip("/")
                    assert any(wanted == a.rstrip("/") or a.startswith(wanted + "/")
                               or wanted.startswith(a.rstrip("/") + "/") for a in allowed), (
                        f"{source} is copied but excluded by .dockerignore")


def test_the_pinned_requirements_are_the_tested_versions():
    """The lock covers both pyproject.toml files, this environment is the lock's, and each image file is the
    lock's part for its image (scripts/image_requirements.py --check)."""
    result = subprocess.run([sys.executable, str(REPO / "scripts" / "image_requirements.py"), "--check"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr


# -- the lock ------------------------------------------------------------------------------------------------
def _image_requirements() -> ModuleType:
    spec = importlib.util.spec_from_file_location("image_requirements", REPO / "scripts" / "image_requirements.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ir = _image_requirements()
LOCK = ir.lock_parse((REPO / "requirements.lock").read_text())


def _pip_installs(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [m.group(0) for m in re.finditer(r"pip install[^&;\n]*", joined)]


def test_every_install_of_requirements_is_hash_checked_from_the_lock():
    makefile = (REPO / "Makefile").read_text()
    from_files = [c for c in _pip_installs(makefile) if "--requirement" in c or " -r " in c]
    assert any("$(LOCK)" in c for c in from_files), from_files
    assert from_files and all("--require-hashes" in c for c in from_files), from_files
    assert re.search(r"^LOCK := requirements\.lock$", makefile, re.MULTILINE)
    # Everything else pip installs in the Makefile is this checkout, built without fetching anything.
    for command in _pip_installs(makefile):
        if command not in from_files and "uv==" not in command:
            assert "--no-deps" in command and "--no-build-isolation" in command, command
    for image, dockerfile in DOCKERFILES.items():
        installs = [c for c in _pip_installs(dockerfile.read_text()) if "--requirement" in c]
        assert installs and all("--require-hashes" in c and f"{image}-requirements.txt" in c for c in installs)


def test_the_image_pins_are_the_locks_own_entries():
    """Version, markers and every hash as the lock has them: an image installs nothing the tests did not."""
    for image in DOCKERFILES:
        pinned = ir.lock_parse((DOCKER / f"{image}-requirements.txt").read_text())
        assert pinned, image
        for name, entries in pinned.items():
            for entry in entries:
                assert entry in LOCK.get(name, []), (image, entry)
    controller = ir.lock_parse((DOCKER / "controller-requirements.txt").read_text())
    assert {"setuptools", "wheel", "kubernetes", "kubernetes-validate"} <= controller.keys()
    host = ir.lock_parse((DOCKER / "host-requirements.txt").read_text())
    assert "django" in host and not {"pytest", "moto", "mypy", "setuptools"} & host.keys()  # runtime only


def test_the_lock_is_hashed_for_every_platform_the_images_build():
    environments = ir.image_environments()
    assert sorted(env["platform_machine"] for env in environments) == ["aarch64", "x86_64"]
    base = re.search(r"FROM python:(\d+\.\d+\.\d+)-", DOCKERFILES["host"].read_text()).group(1)
    assert {env["python_full_version"] for env in environments} == {base}
    # uv's universal resolution: all files of each version are hashed, arm64 wheels too.
    (cryptography,) = [e for e in LOCK["cryptography"] if e.applies(environments[0])]
    assert len(cryptography.hashes) > 4


def test_a_lock_older_than_a_pyproject_or_an_environment_not_the_locks_is_refused():
    environment = ir.image_environments()[0]
    with pytest.raises(ir.LockError, match=r"kombu>=99.*make lock"):  # a constraint raised, not re-locked
        ir.closure(LOCK, ["celery", "kombu>=99"], [environment])
    without = {name: entries for name, entries in LOCK.items() if name != "vine"}
    with pytest.raises(ir.LockError, match=r"no vine.*make lock"):  # a dependency the lock lacks
        ir.closure(without, ["celery"], [environment])
    (boto3,) = LOCK["boto3"]
    elsewhere = {**LOCK, "boto3": [dataclasses.replace(boto3, version="1.0.0")]}
    with pytest.raises(ir.LockError, match=r"boto3 .* installed but requirements\.lock pins 1\.0\.0.*make venv"):
        ir.closure(elsewhere, ["boto3"], [environment])
    assert [e.name for e in ir.closure(LOCK, ["boto3"], [environment])] == [
        "boto3", "botocore", "jmespath", "python-dateutil", "s3transfer", "six", "urllib3"]


# -- the builder stage's install steps, replayed -------------------------------------------------------------
CONTAINER_ROOTS = ("/opt/venv", "/app", "/tmp/", "/src/")
CLEAN_ENV = {"PATH": "/usr/bin:/bin"}  # not this process's PYTHONPATH: what runs must come from the fresh venv


def _replay_builder(dockerfile: Path, root: Path) -> Path:
    """Run the builder stage's COPY/WORKDIR/RUN under `root`; returns the fresh venv."""
    def inside(path: str) -> str:
        return str(root / path.lstrip("/")) + ("/" if path.endswith("/") else "")

    container_path = re.compile("(?<![\\w/])(" + "|".join(map(re.escape, CONTAINER_ROOTS)) + ")")

    def rewrite(command: str) -> str:
        command = container_path.sub(lambda m: inside(m.group(0)), command)  # one pass: no path rewritten twice
        return re.sub(r"\bpip install\b", f"pip install --no-index --find-links {WHEELHOUSE}", command)

    venv = root / "opt" / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    # The tested environment, visible after the fresh one's own site-packages.
    (purelib / "_forest_tested.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    workdir = root
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": os.devnull}
    builder = stages(dockerfile)[0]
    assert builder.name == "builder"
    for instruction, args in builder.instructions:
        if instruction == "WORKDIR":
            workdir = Path(inside(args))
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "ENV":
            env.update(dict(pair.split("=", 1) for pair in shlex.split(args)))
        elif instruction == "COPY":
            *sources, destination = args.split()
            target = Path(inside(destination)) if destination.startswith("/") else workdir / destination
            for source in sources:
                origin = REPO / source
                into = target / origin.name if destination.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                if origin.is_dir():
                    shutil.copytree(origin, into, ignore=shutil.ignore_patterns("__pycache__", "tests", "*.egg-info",
                                                                              ".terraform", "build"))
                else:
                    shutil.copy2(origin, into)
        elif instruction == "RUN":
            result = subprocess.run(["sh", "-c", rewrite(args)], cwd=workdir, env=env, capture_output=True,
                                    text=True, timeout=600, check=False)
            assert result.returncode == 0, f"RUN {args}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return venv


def test_the_host_builder_installs_and_collects_static_offline(tmp_path):
    venv = _replay_builder(DOCKERFILES["host"], tmp_path)
    app = tmp_path / "app"
    assert (app / "staticfiles" / "admin").is_dir(), "collectstatic ran in the builder"
    assert (app / "docker" / "host-entrypoint.sh").is_file()
    check = subprocess.run(
        [str(venv / "bin" / "python"), "manage.py", "check", "--fail-level", "ERROR"], cwd=app,
        env={**CLEAN_ENV, "SECRET_KEY": "check-only", "DEBUG": "0", "ALLOWED_HOSTS": "forest.example"},
        capture_output=True, text=True, timeout=300, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_the_controller_builder_builds_the_agent_offline_with_the_pinned_tools(tmp_path):
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} is missing: `make venv` fetches the image's pinned build tools"
    venv = _replay_builder(DOCKERFILES["controller"], tmp_path)
    python = venv / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import forest_agent, kubernetes, kubernetes_validate, yaml; "
                            "print(forest_agent.__file__)"], env=CLEAN_ENV, capture_output=True, text=True, timeout=120,
                           check=True)
    assert where.stdout.strip().startswith(str(venv)), "the agent was installed into the fresh environment"
    version = subprocess.run([str(venv / "bin" / "forest-controller"), "--version"], env=CLEAN_ENV,
                             capture_output=True, text=True, timeout=120, check=False)
    assert version.returncode == 0 and version.stdout.startswith("forest-controller "), version.stderr
    site = next(venv.glob("lib/python*/site-packages"))
    tools = subprocess.run([str(python), "-m", "pip", "list", "--path", str(site)], capture_output=True, text=True,
                           timeout=120, check=True).stdout
    assert "setuptools" not in tools.split() and "wheel" not in tools.split(), "build tools removed after use"
