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


# --- media types -------------------------------------------------------------------------------------

# RFC 6838 section 4.2: type "/" subtype, each a restricted-name (a letter or digit, then up to 126 of
# letters, digits and ``!#$&-^_.+``); parameters as ``; name=value`` with the same characters (a quoted
# value is never needed by a blob's type, so none is accepted). The whole is bounded by the column.
MAX_MEDIA_TYPE = 200
_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
MEDIA_TYPE_RE = re.compile(rf"^{_NAME}/{_NAME}(?:\s*;\s*{_NAME}={_NAME})*$")

# What a browser renders as active content (script, markup, plugins) when served with its own type. A
# download never declares these: it answers ``application/octet-stream`` instead. Anything whose suffix is
# ``+xml`` (SVG, XHTML, and every XML vocabulary a browser may style or script) is active too.
ACTIVE_MEDIA_TYPES = frozenset({
    "text/html", "application/xhtml+xml", "image/svg+xml", "text/xml", "application/xml", "text/xsl",
    "application/xslt+xml", "text/javascript", "application/javascript", "application/ecmascript",
    "text/ecmascript", "application/x-javascript", "text/vtt", "text/css", "multipart/x-mixed-replace",
    "application/x-shockwave-flash", "application/pdf", "text/cache-manifest", "application/wasm",
    "text/x-component", "application/json+ld",
})
SAFE_DOWNLOAD_TYPE = "application/octet-stream"


def media_type_check(value: object, *, field: str = "media_type") -> str:
    """A declared media type in its stored spelling (type and subtype lower-cased), "" when none is given;
    else ``invalid_media_type`` (not RFC 6838's shape, longer than ``MAX_MEDIA_TYPE``, or holding a
    control character: a stored CR LF would otherwise break every later download's headers)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) > MAX_MEDIA_TYPE or not MEDIA_TYPE_RE.match(value):
        shown = value[:60] if isinstance(value, str) else type(value).__name__
        raise ValidationFailed("invalid_media_type",
                               f"'{shown!s}' is not a media type: type/subtype (RFC 6838), at most "
                               f"{MAX_MEDIA_TYPE} characters, no control characters.", field=field)
    essence, _, params = value.partition(";")
    return essence.lower() + (f";{params}" if params else "")


def served_media_type(stored: str) -> str:
    """The Content-Type a download declares for a stored media type: the type itself when a browser treats
    it as inert data, ``application/octet-stream`` when it could run as active content (or is missing, or
    does not parse — a row written before types were checked)."""
    try:
        checked = media_type_check(stored)
    except ValidationFailed:
        return SAFE_DOWNLOAD_TYPE
    essence = checked.partition(";")[0].strip()
    top = essence.partition("/")[0]
    if (not essence or essence in ACTIVE_MEDIA_TYPES or essence.endswith("+xml") or essence.endswith("/xml")
            or (top in ("text", "multipart", "message") and essence not in ("text/plain", "text/csv"))):
        return SAFE_DOWNLOAD_TYPE
    return checked


def download_headers(*, digest: str, stored_media_type: str) -> dict[str, str]:
    """The headers every blob or artifact download answers with: served as a file to save, never a page —
    an inert declared type, ``attachment`` (named by its digest), a CSP sandbox that forbids script and
    every fetch even if a browser renders it, and ``nosniff`` so the declared type is the one used."""
    return {"Content-Type": served_media_type(stored_media_type),
            "Content-Disposition": f'attachment; filename="{digest.replace(":", "-")}"',
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "X-Content-Type-Options": "nosniff"}
