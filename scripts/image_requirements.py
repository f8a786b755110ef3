"""Write the container images' requirement files (docker/*-requirements.txt) from requirements.lock.

requirements.lock (`make lock`, uv's universal hash-checked resolution) is the one record of which version
of every dependency Forest installs: `make venv`, `make run`, `make test` and both images install from it.
The images need only a part of it, so each image's file is the lock's own entries (version, markers, every
hash) for the closure of that image's roots: forest-host's runtime dependencies (and the agent's, whose
modules the Host image carries) for the Host image; forest-agent[kubernetes]'s and the build tools for the
controller image. The closure is walked offline over the installed distributions' metadata (the virtual
environment is installed from the lock, and checked to be), with markers evaluated for the images'
platforms (Linux, the base image's CPython, amd64 and arm64).

    .venv/bin/python scripts/image_requirements.py                # rewrite both files
    .venv/bin/python scripts/image_requirements.py --check        # exit 1 when the lock, the environment or
                                                                  # a file is out of date
    .venv/bin/python scripts/image_requirements.py --check-lock   # only the lock and the environment (make venv)
    .venv/bin/python scripts/image_requirements.py --build-tools  # print the build tools' locked entries

tests/deploy/test_images.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.markers import Marker, default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
DOCKER = REPO / "docker"
# The controller image builds the agent with these, without build isolation (docker/controller.Dockerfile).
BUILD_TOOLS = ("setuptools", "wheel")
MACHINES = ("x86_64", "aarch64")  # the base image's multi-architecture index: amd64 and arm64
HOW_TO_LOCK = "run `make lock`"
HOW_TO_INSTALL = "run `make venv`"


class LockError(Exception):
    """The lock, the environment or an image file disagrees with what it is made from; says what to run."""


@dataclass(frozen=True)
class Locked:
    """One entry of the lock: a pinned version, the markers it applies under, and its files' hashes."""

    name: str
    version: str
    marker: Marker | None
    hashes: tuple[str, ...]

    def applies(self, environment: Mapping[str, str]) -> bool:
        return self.marker is None or self.marker.evaluate(dict(environment))

    def render(self) -> str:
        head = f"{self.name}=={self.version}" + (f" ; {self.marker}" if self.marker else "")
        return " \\\n".join([head, *(f"    --hash={h}" for h in self.hashes)])


def lock_parse(text: str) -> dict[str, list[Locked]]:
    """The lock's entries by canonical name (a name can have one entry per marker fork)."""
    entries: dict[str, list[Locked]] = {}
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        hashes = tuple(re.findall(r"--hash=(\S+)", line))
        requirement = Requirement(re.sub(r"\s--hash=\S+", "", line).strip())
        pins = [spec.version for spec in requirement.specifier if spec.operator == "=="]
        if len(pins) != 1 or not hashes:
            raise LockError(f"requirements.lock: {line[:80]!r} is not a hashed `name==version`; {HOW_TO_LOCK}")
        name = canonicalize_name(requirement.name)
        entries.setdefault(name, []).append(Locked(name, pins[0], requirement.marker, hashes))
    return entries


def image_environments(dockerfile: Path = DOCKER / "host.Dockerfile") -> list[dict[str, str]]:
    """Marker environments of the images: the base image's Python on Linux, one per architecture."""
    found = re.search(r"^FROM python:(\d+)\.(\d+)\.(\d+)-", dockerfile.read_text(), re.MULTILINE)
    if found is None:
        raise LockError(f"{dockerfile.name}: no `FROM python:X.Y.Z-…` base to read the image's Python from")
    major, minor, micro = found.groups()
    base = {**default_environment(), "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython",
            "python_version": f"{major}.{minor}", "python_full_version": f"{major}.{minor}.{micro}",
            "implementation_version": f"{major}.{minor}.{micro}"}
    return [{**base, "platform_machine": machine} for machine in MACHINES]


def _pick(lock: Mapping[str, list[Locked]], requirement: Requirement, environment: Mapping[str, str]) -> Locked:
    name = canonicalize_name(requirement.name)
    chosen = [entry for entry in lock.get(name, []) if entry.applies(environment)]
    if not chosen:
        raise LockError(f"{requirement} is required but requirements.lock has no {name} for this platform; "
                        f"{HOW_TO_LOCK}")
    entry = chosen[0]
    if not requirement.specifier.contains(Version(entry.version), prereleases=True):
        raise LockError(f"{requirement} is required but requirements.lock pins {name}=={entry.version}; "
                        f"{HOW_TO_LOCK}")
    return entry


def closure(lock: Mapping[str, list[Locked]], roots: Iterable[str],
            environments: Iterable[Mapping[str, str]]) -> list[Locked]:
    """The lock's entries that `roots` need, transitively, on any of `environments`.

    Each requirement's specifier must hold for the locked version (else the lock is older than a
    pyproject.toml), and the installed distribution whose metadata is read must be the locked version (else
    the environment is not the lock's).
    """
    needed: dict[tuple[str, str], Locked] = {}
    for environment in environments:
        pending = [(Requirement(raw), frozenset(Requirement(raw).extras)) for raw in roots]
        seen: set[tuple[str, frozenset[str]]] = set()
        while pending:
            requirement, extras = pending.pop()
            key = (canonicalize_name(requirement.name), extras)
            if key in seen:
                continue
            seen.add(key)
            entry = _pick(lock, requirement, environment)
            needed[(entry.name, entry.version)] = entry
            try:
                dist = metadata.distribution(entry.name)
            except metadata.PackageNotFoundError:
                raise LockError(f"{entry.name} is needed but not installed here, so its dependencies cannot be "
                                f"read; {HOW_TO_INSTALL}") from None
            if dist.version != entry.version:
                raise LockError(f"{entry.name} {dist.version} is installed but requirements.lock pins "
                                f"{entry.version}; {HOW_TO_INSTALL}")
            for raw in dist.requires or []:
                child = Requirement(raw)
                if child.marker is not None:
                    wanted = [{**environment, "extra": extra} for extra in (extras or {""})]
                    if not any(child.marker.evaluate(env) for env in wanted):
                        continue
                pending.append((child, frozenset(child.extras)))
    return sorted(needed.values(), key=lambda entry: (entry.name, Version(entry.version)))


def _project(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def roots() -> dict[str, list[str]]:
    """What each install starts from: the images' roots, and everything the lock must cover."""
    host, agent = _project(REPO / "pyproject.toml"), _project(REPO / "agent" / "pyproject.toml")
    every = [*host["project"]["dependencies"], *agent["project"]["dependencies"], *BUILD_TOOLS,
             *host["build-system"]["requires"], *agent["build-system"]["requires"]]
    for project in (host, agent):
        for extra in project["project"].get("optional-dependencies", {}).values():
            every.extend(extra)
    return {
        "host": [*host["project"]["dependencies"], *agent["project"]["dependencies"]],
        "controller": [*agent["project"]["dependencies"], *agent["project"]["optional-dependencies"]["kubernetes"],
                       *BUILD_TOOLS],
        "every": every,
    }


def _render(title: str, entries: list[Locked]) -> str:
    lines = [f"# {title}",
             "# Generated by scripts/image_requirements.py from requirements.lock (`make lock`); do not edit.",
             *(entry.render() for entry in entries)]
    return "\n".join(lines) + "\n"


def files(lock: Mapping[str, list[Locked]]) -> dict[Path, str]:
    environments = image_environments()
    wanted = roots()
    return {
        DOCKER / "host-requirements.txt": _render(
            "Forest Host image: forest-host's runtime dependencies (and the agent's, whose modules it carries).",
            closure(lock, wanted["host"], environments)),
        DOCKER / "controller-requirements.txt": _render(
            "forest-controller image: forest-agent[kubernetes]'s dependencies and the build tools for the agent.",
            closure(lock, wanted["controller"], environments)),
    }


def lock_check(lock: Mapping[str, list[Locked]]) -> None:
    """Raise LockError when the lock is older than a pyproject.toml or this environment is not the lock's."""
    closure(lock, roots()["every"], [default_environment()])


def check(lock: Mapping[str, list[Locked]]) -> list[str]:
    """Problems, each with what to run: a lock older than a pyproject.toml, an environment that is not the
    lock's (both raised), an image file that is not the lock's part for its image (listed)."""
    lock_check(lock)
    return [f"{path.relative_to(REPO)} is out of date; run scripts/image_requirements.py (`make lock` does)"
            for path, text in files(lock).items() if not path.is_file() or path.read_text() != text]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="fail when something is out of date instead of writing")
    mode.add_argument("--check-lock", action="store_true",
                      help="fail only when the lock is older than a pyproject.toml or the environment is not it")
    mode.add_argument("--build-tools", action="store_true", help="print the build tools' locked entries")
    args = parser.parse_args()
    try:
        lock = lock_parse(LOCK.read_text())
        if args.build_tools:
            print("\n".join(entry.render() for name in BUILD_TOOLS for entry in lock[name]))
            return 0
        if args.check_lock:
            lock_check(lock)
            return 0
        if args.check:
            problems = check(lock)
            for problem in problems:
                print(problem, file=sys.stderr)
            return 1 if problems else 0
        for path, text in files(lock).items():
            path.write_text(text)
    except LockError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
