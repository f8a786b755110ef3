"""The fake kubelet's path mapping (kube_fake.local_path): a Pod's mounts hide the container paths under
them, but not the image's own files, which in these tests are this machine's interpreter and checkout."""

from __future__ import annotations

from pathlib import Path

from kube_fake import IMAGE_PATHS, local_path

MOUNTS = {"/tmp": Path("/scratch/volumes/tmp"), "/workspace": Path("/scratch/volumes/workspace")}
CHECKOUT = ("/tmp/forest-pathcheck", "/tmp/forest-pathcheck/.venv")


def test_a_mount_maps_the_container_paths_under_it() -> None:
    assert local_path("/tmp", MOUNTS, CHECKOUT) == "/scratch/volumes/tmp"
    assert local_path("/tmp/out.bin", MOUNTS, CHECKOUT) == "/scratch/volumes/tmp/out.bin"
    assert local_path("/workspace/model.bin", MOUNTS, CHECKOUT) == "/scratch/volumes/workspace/model.bin"
    assert local_path("/tmpfs/x", MOUNTS, CHECKOUT) == "/tmpfs/x"  # a prefix of the name is not a parent
    assert local_path("print(1)", MOUNTS, CHECKOUT) == "print(1)"


def test_a_checkout_under_a_mounted_path_stays_the_images_own() -> None:
    """The checkout at /tmp/forest-pathcheck ran its steps as /scratch/volumes/tmp/forest-pathcheck/.venv/
    bin/python, which does not exist: exit 127 for every container step."""
    python = "/tmp/forest-pathcheck/.venv/bin/python"
    assert local_path(python, MOUNTS, CHECKOUT) == python
    assert local_path(f"{python} -m forest_agent.data", MOUNTS, CHECKOUT) == f"{python} -m forest_agent.data"
    source = "/tmp/forest-pathcheck/agent/src"
    assert local_path(source, MOUNTS, CHECKOUT) == source
    # Deeper wins, as with real mounts: a volume inside the image's directory hides that part of it.
    deeper = {**MOUNTS, "/tmp/forest-pathcheck/data": Path("/v")}
    assert local_path("/tmp/forest-pathcheck/data/x", deeper, CHECKOUT) == "/v/x"


def test_the_image_is_this_interpreter_and_this_checkout() -> None:
    import sys

    assert sys.prefix in IMAGE_PATHS
    assert str(Path(__file__).resolve().parents[2]) in IMAGE_PATHS
