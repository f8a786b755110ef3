"""Step data, the same way on both executors: inputs fetched before the command, outputs uploaded after it.

* **Inputs** (`payload.inputs`): each blob with a `path` is streamed from Host's store
  (`GET artifacts/<digest>/blob`) through the bundle fetcher's download thread — bounded by the agent's
  limit and the size Host declared, hashed while it streams — into a file under the step's root, created
  fresh (`O_EXCL|O_NOFOLLOW`, parents checked one by one, never through a link), made read-only, and
  deleted unless its digest is the one Host resolved at submit. An image input has no path: the step
  gets its pinned reference in the environment.
* **Outputs** (`payload.outputs`): after a successful command each declared path is uploaded
  (`PUT artifacts/runs/<run>/nodes/<node>/blobs/<key>`) — a file as it is, a directory as a
  deterministic tar (sorted entries, owner 0, mtime 0, normalised modes) — hashed while it streams;
  Host's answer must name the same digest. A missing path fails the step with `output_missing`; a path
  that resolves outside the root, `output_out_of_scope`. The key is per attempt, so a repeated upload is
  the same artifact (idempotent).
* The step's environment names every input and output: `FOREST_INPUT_<NAME>` / `FOREST_OUTPUT_<NAME>`
  (upper case, other characters as `_`), absolute paths (an image input: its pinned reference).

The Kubernetes executor runs the same code inside the pod (`python -m forest_agent.data fetch|upload`,
an init container and a final step, authenticated with the job's short-lived data token).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import stat
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from forest_agent.download import Download
from forest_agent.errors import BundleRefused, DataRefused
from forest_agent.wire.messages import DataInput, DataOutput, MessageInvalid

log = logging.getLogger(__name__)

CHUNK = 1 << 20
DEFAULT_MAX_INPUT_BYTES = 64 * 1024**3
INPUT_ENV_PREFIX = "FOREST_INPUT_"
OUTPUT_ENV_PREFIX = "FOREST_OUTPUT_"
TAR_MEDIA_TYPE = "application/x-tar"
_PROGRESS_EVERY_S = 2.0


@dataclass(frozen=True)
class _BlobRef:
    url: str
    digest: str
    size: int | None


def env_name(prefix: str, name: str) -> str:
    return prefix + re.sub(r"[^A-Z0-9]", "_", name.upper())


def data_env(inputs: tuple[DataInput, ...], outputs: tuple[DataOutput, ...], root: Path) -> dict[str, str]:
    """`FOREST_INPUT_<NAME>` and `FOREST_OUTPUT_<NAME>` for the step."""
    env = {}
    for item in inputs:
        env[env_name(INPUT_ENV_PREFIX, item.name)] = str(root / item.path) if item.path else item.reference
    for output in outputs:
        env[env_name(OUTPUT_ENV_PREFIX, output.name)] = str(root / output.path)
    return env


# --- inputs ----------------------------------------------------------------------------------------------


def _open_confined(root: Path, relative: str) -> int:
    """A new file at `root/relative`, never outside `root`: each parent is created or must be a real
    directory (a link anywhere on the way is refused), and the file itself must not exist yet."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise DataRefused(f"input path {relative!r} leaves the step's directory", code="input_path_escape")
    where = root
    for part in parts[:-1]:
        where = where / part
        with contextlib.suppress(FileExistsError):
            where.mkdir(mode=0o755)
        if where.is_symlink() or not where.is_dir():
            raise DataRefused(f"input path {relative!r} passes through a link", code="input_path_escape")
    try:
        return os.open(root / relative, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise DataRefused(f"input path {relative!r} already exists", code="input_path_escape") from None


def fetch_input(
    http: httpx.Client, *, base_url: str, headers: dict[str, str], item: DataInput, root: Path, limit: int
) -> int:
    """Download one blob input to `root/item.path`, verified; returns its size. On any refusal the partial
    file is removed."""
    assert item.path is not None
    limit = min(limit, item.size) if item.size is not None else limit
    if item.size is not None and item.size > limit:
        raise DataRefused(f"input {item.name} is {item.size} bytes, over the limit", code="input_too_large")
    target = root / item.path
    fd = _open_confined(root, item.path)
    download = Download(
        http,
        _BlobRef(f"{base_url}artifacts/{item.digest}/blob", item.digest, item.size),
        headers,
        max(limit, 0),
        what="input",
    )
    download.start()
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := download.read(CHUNK):
                out.write(chunk)
        download.join()
        if download.error is not None:
            raise download.error
        actual = "sha256:" + download.hasher.hexdigest()
        if not hmac.compare_digest(actual, item.digest):
            raise DataRefused(
                f"input {item.name} is {actual}, expected {item.digest}", code="input_digest_mismatch"
            )
        os.chmod(target, 0o444)  # the step sees its inputs read-only
    except BundleRefused as exc:
        download.abandon()
        target.unlink(missing_ok=True)
        raise DataRefused(exc.message, code=exc.code) from None
    except BaseException:
        download.abandon()
        target.unlink(missing_ok=True)
        raise
    return download.received


def fetch_inputs(
    http: httpx.Client,
    *,
    base_url: str,
    headers: dict[str, str],
    inputs: tuple[DataInput, ...],
    root: Path,
    limit: int = DEFAULT_MAX_INPUT_BYTES,
) -> int:
    """Every blob input of a step, one after another; the total bytes fetched."""
    total = 0
    for item in inputs:
        if item.path is None:
            continue  # an image: the step pulls it by its pinned reference
        started = time.monotonic()
        size = fetch_input(http, base_url=base_url, headers=headers, item=item, root=root, limit=limit)
        total += size
        log.info(
            "input %s: %d bytes to %s in %.2fs, digest verified",
            item.name,
            size,
            item.path,
            time.monotonic() - started,
        )
    return total


# --- outputs ---------------------------------------------------------------------------------------------


def _output_source(root: Path, output: DataOutput) -> Path:
    path = root / output.path
    if not os.path.lexists(path):
        raise DataRefused(f"output {output.name}: nothing at {output.path}", code="output_missing")
    real_root, real = os.path.realpath(root), os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise DataRefused(
            f"output {output.name}: {output.path} resolves outside the step's directory",
            code="output_out_of_scope",
        )
    if not (os.path.isfile(real) or os.path.isdir(real)):
        raise DataRefused(
            f"output {output.name}: {output.path} is not a file or directory", code="output_missing"
        )
    return Path(real)


def _tar_info(path: Path, arcname: str) -> tarfile.TarInfo | None:
    """A member that says only what the content is: no owner, no time, modes reduced to 644/755."""
    st = os.lstat(path)
    info = tarfile.TarInfo(arcname)
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        return None  # sockets, devices, fifos are not content
    return info


def write_tar(directory: Path, out: Any) -> None:
    """`directory` as a deterministic tar stream into `out` (same tree -> same bytes -> same digest)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for current, dirs, files in os.walk(directory):
            dirs.sort()
            base = Path(current)
            for name in sorted(dirs + files):
                path = base / name
                info = _tar_info(path, path.relative_to(directory).as_posix())
                if info is None:
                    continue
                if info.type == tarfile.REGTYPE:
                    with open(path, "rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)


def _file_chunks(path: Path, hasher: Any, progress: str) -> Iterator[bytes]:
    sent, last = 0, time.monotonic()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            hasher.update(chunk)
            sent += len(chunk)
            if time.monotonic() - last >= _PROGRESS_EVERY_S:
                last = time.monotonic()
                log.info("%s: %.1f MB uploaded", progress, sent / 1e6)
            yield chunk


def upload_output(
    http: httpx.Client,
    *,
    base_url: str,
    headers: dict[str, str],
    run_id: str,
    node: str,
    output: DataOutput,
    root: Path,
    scratch: Path,
) -> dict[str, Any]:
    """Upload one output; returns Host's artifact (`id`, `digest`, `size`, ...)."""
    source = _output_source(root, output)
    media_type, staged = "application/octet-stream", None
    if source.is_dir():
        # A tar's length is known only once it is written: staged on disk (constant memory), then sent.
        staged = scratch / f".forest-output-{output.name}.tar"
        with open(staged, "wb") as handle:
            write_tar(source, handle)
        source, media_type = staged, TAR_MEDIA_TYPE
    hasher = hashlib.sha256()
    size = source.stat().st_size
    url = (
        f"{base_url}artifacts/runs/{quote(run_id)}/nodes/{quote(node)}/blobs/{quote(output.key)}"
        f"?media_type={quote(media_type)}"
    )
    try:
        response = http.put(
            url,
            content=_file_chunks(source, hasher, f"output {output.name}"),
            headers={**headers, "Content-Length": str(size), "Content-Type": media_type},
        )
    except httpx.HTTPError as exc:
        raise DataRefused(
            f"output {output.name}: upload failed: {exc}", code="output_upload_failed"
        ) from None
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)
    if response.status_code not in (200, 201):
        try:
            code = response.json().get("code", "")
        except ValueError:
            code = ""
        raise DataRefused(
            f"output {output.name}: Host answered {response.status_code} {code}".strip(),
            code="output_upload_failed",
        )
    artifact: dict[str, Any] = response.json()
    digest = "sha256:" + hasher.hexdigest()
    if not hmac.compare_digest(str(artifact.get("digest")), digest):
        raise DataRefused(
            f"output {output.name}: Host stored {artifact.get('digest')}, we sent {digest}",
            code="output_digest_mismatch",
        )
    return artifact


def upload_outputs(
    http: httpx.Client,
    *,
    base_url: str,
    headers: dict[str, str],
    run_id: str,
    node: str,
    outputs: tuple[DataOutput, ...],
    root: Path,
    scratch: Path,
) -> dict[str, dict[str, Any]]:
    """Every declared output (all present, or `output_missing` before a byte is sent); name -> artifact."""
    for output in outputs:
        _output_source(root, output)
    done = {}
    for output in outputs:
        started = time.monotonic()
        artifact = upload_output(
            http,
            base_url=base_url,
            headers=headers,
            run_id=run_id,
            node=node,
            output=output,
            root=root,
            scratch=scratch,
        )
        done[output.name] = {
            "digest": artifact.get("digest"),
            "artifact_id": artifact.get("id"),
            "size": artifact.get("size"),
        }
        log.info(
            "output %s: %s bytes uploaded as %s in %.2fs",
            output.name,
            artifact.get("size"),
            artifact.get("digest"),
            time.monotonic() - started,
        )
    return done


# --- inside a Kubernetes pod ------------------------------------------------------------------------------


def _manifest(path: str | None) -> dict[str, Any]:
    manifest: dict[str, Any]
    if path is None:
        manifest = json.loads(os.environ["FOREST_DATA_MANIFEST"])
    else:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    return manifest


def main(argv: list[str] | None = None) -> int:
    """`python -m forest_agent.data fetch|upload --root DIR`: the pod's init container and final step.
    The manifest, Host's API URL and the job's data token come from `FOREST_DATA_MANIFEST`,
    `FOREST_DATA_URL` and `FOREST_DATA_TOKEN` (a Secret the controller writes; never the Grove's
    credential). A refusal exits 3 with its code as the termination message."""
    parser = argparse.ArgumentParser(prog="forest-data")
    parser.add_argument("action", choices=["fetch", "upload"])
    parser.add_argument(
        "--manifest", help="JSON file {run_id, node, inputs, outputs} (default: $FOREST_DATA_MANIFEST)"
    )
    parser.add_argument("--root", required=True, help="the step's directory (an emptyDir)")
    parser.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_INPUT_BYTES)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    manifest = _manifest(args.manifest)
    base_url = os.environ["FOREST_DATA_URL"].rstrip("/") + "/"
    headers = {"Authorization": f"Job {os.environ['FOREST_DATA_TOKEN']}"}
    root = Path(args.root)
    try:
        inputs = tuple(
            DataInput.parse(item, f"inputs[{i}]") for i, item in enumerate(manifest.get("inputs", []))
        )
        outputs = tuple(
            DataOutput.parse(o, f"outputs[{i}]") for i, o in enumerate(manifest.get("outputs", []))
        )
        with httpx.Client(timeout=httpx.Timeout(30.0, read=300.0), follow_redirects=False) as http:
            if args.action == "fetch":
                fetch_inputs(
                    http, base_url=base_url, headers=headers, inputs=inputs, root=root, limit=args.max_bytes
                )
            else:
                done = upload_outputs(
                    http,
                    base_url=base_url,
                    headers=headers,
                    run_id=manifest["run_id"],
                    node=manifest["node"],
                    outputs=outputs,
                    root=root,
                    scratch=Path("/tmp"),
                )
                print(json.dumps(done, sort_keys=True))
    except (DataRefused, MessageInvalid) as exc:
        # The first line of the termination message is the code: the controller reports it as the reason.
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        message_file = os.environ.get("FOREST_DATA_MESSAGE_FILE")
        if message_file:
            Path(message_file).write_text(exc.code)
        return 3
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "forest-data"
    sys.exit(main())
