"""The two compute jobs of the lineage example, as request bodies for ``POST /api/forest/v1/compute/jobs``.

``writer`` writes a file (and a small directory) and declares both as outputs; ``checker`` takes the
file as an input *by reference* (the artifact id Host recorded for the writer's output) and checks its
digest itself before using it. The same two bodies run on a native Grove (``run.py`` against ``make run``'s
local agent, ``tests/e2e/test_step_data.py``) and through the Kubernetes controller
(``tests/e2e/test_kube_step_data.py``). Plain stdlib: the step commands are Python one-file programs."""
from __future__ import annotations

import sys

WRITE = """
import os, pathlib
result = pathlib.Path(os.environ["FOREST_OUTPUT_RESULT"])
result.parent.mkdir(parents=True, exist_ok=True)
result.write_bytes(b"forty-two\\n" * 1000)
report = pathlib.Path(os.environ["FOREST_OUTPUT_REPORT"])
(report / "sub").mkdir(parents=True)
(report / "a.txt").write_text("alpha")
(report / "sub" / "b.txt").write_text("beta")
print("wrote", result)
"""

CHECK = """
import hashlib, os
path = os.environ["FOREST_INPUT_DATA"]
digest = "sha256:" + hashlib.sha256(open(path, "rb").read()).hexdigest()
assert digest == os.environ["EXPECTED"], (digest, os.environ["EXPECTED"])
assert os.stat(path).st_mode & 0o222 == 0, "an input is read-only"
print("input verified", digest)
"""


def _step(name: str, code: str, *, kind: str, image: str | None, python: str, **extra) -> dict:
    step = {"name": name, "kind": kind, "command": [python, "-c", code], "timeout_s": 120, **extra}
    if kind == "container":
        step["image"] = image
    return step


def writer(*, grove: str, kind: str = "native", image: str | None = None, python: str = sys.executable) -> dict:
    return {"name": "lineage-writer", "grove": grove, "steps": [_step(
        "write", WRITE, kind=kind, image=image, python=python,
        outputs=[{"name": "result", "path": "out/result.bin"}, {"name": "report", "path": "report"}])]}


def checker(*, grove: str, artifact_id: int, digest: str, kind: str = "native", image: str | None = None,
            python: str = sys.executable) -> dict:
    return {"name": "lineage-checker", "grove": grove, "steps": [_step(
        "check", CHECK, kind=kind, image=image, python=python, env={"EXPECTED": digest},
        inputs=[{"artifact": artifact_id, "path": "in/data.bin", "name": "data"}])]}
