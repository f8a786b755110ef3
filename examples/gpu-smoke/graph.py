"""Build the GPU smoke pipeline graph (a Canopy Pipeline Graph, run kind `compute`).

    python examples/gpu-smoke/graph.py [--grove SLUG] [--image IMAGE] [--expected-gpus N] > graph.json
    forest runs create graph.json --kind compute

Three container steps, one after another: `prepare` (CPU), `inspect` (1 NVIDIA GPU, CUDA-free),
`evaluate` (CPU). Each step's program is one file in steps/, passed to `python -c`, so any image
with Python 3 works; the NVIDIA runtime injects `nvidia-smi` into the accelerated step.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

STEPS = Path(__file__).parent / "steps"
# A tag, not a digest: pin it to the digest your registry serves before a real run (README, checklist).
DEFAULT_IMAGE = "docker.io/library/python:3.12-slim"


def graph(*, image: str = DEFAULT_IMAGE, grove: str | None = None, expected_gpus: int = 1) -> dict:
    def step(name: str, needs: list[str], **extra: object) -> dict:
        node = {"id": name, "kind": "exec", "runtime": "container", "image": image, "reuse": "never",
                "command": ["python3", "-c", (STEPS / f"{name}.py").read_text()], "needs": needs,
                "resources": {"cpu_milli": 500, "memory_bytes": 512 * 1024**2}, "timeout_s": 600, **extra}
        if grove:
            node["grove"] = grove
        return node

    return {"nodes": [
        step("prepare", [], env={"EXPECTED_GPUS": str(expected_gpus)}),
        step("inspect", ["prepare"], env={"NVIDIA_DRIVER_CAPABILITIES": "utility"},
             accelerators={"count": expected_gpus, "vendor": "nvidia"}),
        step("evaluate", ["inspect", "prepare"]),
    ]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grove", help="pin every step to this Kubernetes Grove (slug or id)")
    parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"image with Python 3 (default {DEFAULT_IMAGE})")
    parser.add_argument("--expected-gpus", type=int, default=1, help="GPUs the accelerated step claims (default 1)")
    args = parser.parse_args()
    print(json.dumps(graph(image=args.image, grove=args.grove, expected_gpus=args.expected_gpus), indent=2))


if __name__ == "__main__":
    main()
