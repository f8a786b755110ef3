"""Graph builders shared by the pipeline tests."""
from __future__ import annotations

IMAGE = "registry.example/tools/python@sha256:" + "a" * 64


def exec_node(node_id: str, *, needs=(), image: str | None = IMAGE, runtime: str = "container", **extra) -> dict:
    node = {"id": node_id, "kind": "exec", "runtime": runtime, "command": ["python", "-c", f"print('{node_id}')"],
            "needs": list(needs), **extra}
    if runtime == "container" and image is not None:
        node["image"] = image
    return node


def graph(*nodes: dict) -> dict:
    return {"nodes": list(nodes)}
