"""On-disk generations of native workloads: one directory each, an atomic `current` switch, the
previous generation kept for rollback, older ones pruned (their secrets with them).

    workloads/<workload>/
        current  -> generations/<generation_id>     (symlink, replaced with rename(2): atomic)
        previous -> generations/<generation_id>
        generations/<generation_id>/
            app/        extracted bundle (the process's working directory)
            secrets/    0700, one 0600 file per secret
            spec.json   the generation as Host sent it, minus secret values
            output.log  the process's stdout+stderr
        generations/<generation_id>.partial/        while installing; renamed when complete
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from forest_agent.state import write_private_json

SECRETS_DIR = "secrets"


class GenerationStore:
    def __init__(self, workloads_dir: Path) -> None:
        self.root = workloads_dir

    def workload_dir(self, workload: str) -> Path:
        return self.root / workload

    def generation_dir(self, workload: str, generation_id: str) -> Path:
        return self.workload_dir(workload) / "generations" / generation_id

    def installed(self, workload: str, generation_id: str) -> bool:
        return (self.generation_dir(workload, generation_id) / "spec.json").is_file()

    def workloads(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    # -- install -------------------------------------------------------------------------------
    def begin(self, workload: str, generation_id: str) -> Path:
        """A fresh, private `.partial` directory to install into."""
        partial = self.generation_dir(workload, generation_id).with_name(f"{generation_id}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(mode=0o700, parents=True)
        return partial

    def commit(self, workload: str, generation_id: str, partial: Path, spec: dict[str, Any]) -> Path:
        write_private_json(partial / "spec.json", _without_secret_values(spec))
        final = self.generation_dir(workload, generation_id)
        shutil.rmtree(final, ignore_errors=True)
        os.rename(partial, final)
        return final

    def discard(self, partial: Path) -> None:
        shutil.rmtree(partial, ignore_errors=True)

    def read_spec(self, workload: str, generation_id: str) -> dict[str, Any]:
        path = self.generation_dir(workload, generation_id) / "spec.json"
        spec: dict[str, Any] = json.loads(path.read_text())
        return spec

    # -- secrets -------------------------------------------------------------------------------
    def write_secrets(self, generation_dir: Path, secrets: dict[str, str]) -> Path:
        """Write each secret to its own 0600 file in a 0700 directory of this generation."""
        directory = generation_dir / SECRETS_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        for name, value in secrets.items():
            if "/" in name or name in (".", ".."):
                raise ValueError(f"secret name {name!r} cannot be a file name")
            fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(value)
        return directory

    def read_secrets(self, workload: str, generation_id: str) -> dict[str, str]:
        directory = self.generation_dir(workload, generation_id) / SECRETS_DIR
        if not directory.is_dir():
            return {}
        return {p.name: p.read_text() for p in sorted(directory.iterdir()) if p.is_file()}

    # -- switch and rollback -------------------------------------------------------------------
    def current(self, workload: str) -> str | None:
        return self._pointer(workload, "current")

    def previous(self, workload: str) -> str | None:
        return self._pointer(workload, "previous")

    def switch(self, workload: str, generation_id: str) -> None:
        """Make `generation_id` current; what was current becomes previous. Each step is a rename."""
        old = self.current(workload)
        if old == generation_id:
            return
        if old is not None:
            self._point(workload, "previous", old)
        self._point(workload, "current", generation_id)

    def prune(self, workload: str) -> list[str]:
        """Delete every generation but current and previous (secrets included); return what went."""
        keep = {self.current(workload), self.previous(workload)}
        generations = self.workload_dir(workload) / "generations"
        removed: list[str] = []
        if not generations.is_dir():
            return removed
        for path in generations.iterdir():
            if path.name not in keep:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
        return removed

    def _pointer(self, workload: str, name: str) -> str | None:
        link = self.workload_dir(workload) / name
        try:
            target = os.readlink(link)
        except (FileNotFoundError, OSError):
            return None
        return Path(target).name

    def _point(self, workload: str, name: str, generation_id: str) -> None:
        link = self.workload_dir(workload) / name
        tmp = link.with_name(f".{name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(os.path.join("generations", generation_id), tmp)
        os.replace(tmp, link)


def _without_secret_values(spec: dict[str, Any]) -> dict[str, Any]:
    clean = dict(spec)
    if isinstance(clean.get("secrets"), dict):
        clean["secrets"] = sorted(clean["secrets"])
    return clean
