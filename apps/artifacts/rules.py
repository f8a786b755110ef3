"""Pure rules for artifacts (no Django): the scope of a Grove-written object key, and whether an
artifact's platform can run where it is asked to."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from apps.artifacts.oci import can_run
from apps.core.errors import ValidationFailed
from apps.core.platforms import PlatformError, parse_platform

KEY_SEGMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
NODE_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MAX_KEY = 400


def canonical_run_id(run_id: str) -> str:
    """A pipeline run id (a UUID) in its one spelling, or ``invalid_run_id``."""
    try:
        return str(uuid.UUID(str(run_id)))
    except ValueError:
        raise ValidationFailed("invalid_run_id", f"'{str(run_id)[:80]}' is not a run id.", field="run_id") from None


def run_object_key(*, run_id: str, node_id: str, key: str) -> str:
    """The object key a Grove writes for its run's node: ``runs/<run>/<node>/<key>``. ``key`` is a
    relative path of plain segments; anything that could climb out of that prefix (``..``, an absolute
    path, a backslash, an empty or hidden segment) is ``blob_key_out_of_scope``."""
    run_id = canonical_run_id(run_id)
    if not NODE_ID.match(node_id or ""):
        raise ValidationFailed("invalid_node_id", f"'{node_id}' is not a node id.", field="node")
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise ValidationFailed("invalid_blob_key", f"An object key is 1 to {MAX_KEY} characters.", field="key")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise ValidationFailed("blob_key_out_of_scope",
                               f"'{key}' is not a relative key under runs/{run_id}/{node_id}/.", field="key")
    for segment in key.split("/"):
        if segment in ("", ".", "..") or not KEY_SEGMENT.match(segment):
            raise ValidationFailed(
                "blob_key_out_of_scope" if segment in ("", ".", "..") else "invalid_blob_key",
                f"'{key}': each segment is letters, digits, '.', '_' or '-' (not '.' or '..', not empty); "
                f"a Grove writes only under runs/{run_id}/{node_id}/.", field="key")
    return f"runs/{run_id}/{node_id}/{key}"


@dataclass(frozen=True)
class PlatformFit:
    fits: bool | None  # None: the artifact's platform is unknown (never a mismatch)
    detail: str


def platform_fit(*, artifact_platform: str, required: list[str], what: str = "the target") -> PlatformFit:
    """Can an artifact built for ``artifact_platform`` run on one of ``required`` (variant-aware)?"""
    wanted = []
    for value in required or []:
        try:
            wanted.append(parse_platform(value))
        except PlatformError:
            continue
    if not wanted:
        return PlatformFit(True, f"{what} names no platform; any platform will do")
    if not artifact_platform:
        return PlatformFit(None, "the artifact's platform is unknown (its config could not be read)")
    try:
        have = parse_platform(artifact_platform)
    except PlatformError:
        return PlatformFit(None, f"the artifact's platform '{artifact_platform}' is not a platform")
    names = ", ".join(str(p) for p in wanted)
    if any(can_run(platform, have) for platform in wanted):
        return PlatformFit(True, f"{have} runs on {names}")
    return PlatformFit(False, f"the artifact is {have}, but {what} runs {names}")
