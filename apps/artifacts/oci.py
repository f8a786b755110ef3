"""OCI images as data: references, manifests, indexes, image configs, and resolving an index for a
Grove's platforms. Pure: no Django, no network (``registry.py`` fetches; this module decides).

Resolution rule (docs/decisions.md, "OCI index resolution"): walk the Grove's platforms **in its
reported order**; for each, walk the variants it can run from best to worst (``linux/arm/v7`` runs
v7, then v6, then v5; ``linux/arm64`` is ``arm64/v8``); the first index entry that matches wins.
Entries whose platform is not a real one (``unknown/unknown`` attestation manifests) never match.
When the Grove reports no usable platform, the fallback platforms (``FOREST_OCI_FALLBACK_PLATFORMS``,
default ``linux/amd64``) are walked instead and the choice is marked ``fallback``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from apps.artifacts.digests import DIGEST_RE
from apps.core.errors import Conflict, ValidationFailed
from apps.core.platforms import Platform, PlatformError, parse_platform

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_MANIFEST_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
CONFIG_TYPES = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
REGISTRY_RE = re.compile(
    r"^(?:localhost|[A-Za-z0-9.-]+\.[A-Za-z0-9.-]+|[A-Za-z0-9.-]+:[0-9]+|\[[0-9a-fA-F:]+\](?::[0-9]+)?)$")
DOCKER_HUB = "registry-1.docker.io"
MAX_REFERENCE = 500
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # the distribution spec's recommended manifest limit
MAX_CONFIG_BYTES = 16 * 1024 * 1024
MAX_INDEX_ENTRIES = 1000

# Better variants first: what a Grove reporting the key can run. ``arm`` without a variant is v7 (as
# containerd normalises it); ``arm64``/``amd64`` drop their default variant (apps.core.platforms).
VARIANT_LADDERS: dict[str, tuple[str, ...]] = {
    "arm": ("v7", "v6", "v5"),
    "arm64": ("v9", ""),
    "amd64": ("v4", "v3", "v2", ""),
}
IMPLIED_VARIANTS = {"arm": "v7"}


# --- references -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def reference(self) -> str:
        """What to ask the registry for: the digest when pinned, else the tag (``latest`` by default)."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        """The same image pinned by ``digest`` (``registry/repository@sha256:...``)."""
        return f"{self.registry}/{self.repository}@{digest}"

    def __str__(self) -> str:
        text = f"{self.registry}/{self.repository}"
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(value: object, field: str = "reference") -> ImageReference:
    """``[registry/]repository[:tag][@sha256:...]`` as Docker reads it (the first component is a
    registry when it has a dot or a port or is ``localhost``; otherwise Docker Hub)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationFailed("invalid_image_reference", "An image reference is a non-empty string.", field=field)
    text = value.strip()
    if len(text) > MAX_REFERENCE or any(c.isspace() for c in text):
        raise ValidationFailed("invalid_image_reference", f"'{text[:80]}' is not an image reference.", field=field)
    digest = ""
    if "@" in text:
        text, digest = text.rsplit("@", 1)
        if not DIGEST_RE.match(digest):
            raise ValidationFailed("invalid_image_reference",
                                   f"'{value}': the digest must be 'sha256:' and 64 lowercase hex digits.", field=field)
    tag = ""
    last = text.rsplit("/", 1)[-1]
    if ":" in last:
        text, tag = text.rsplit(":", 1)
        if not TAG_RE.match(tag):
            raise ValidationFailed("invalid_image_reference", f"'{value}': '{tag}' is not a valid tag.", field=field)
    first, _, rest = text.partition("/")
    if rest and REGISTRY_RE.match(first):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, text if "/" in text else f"library/{text}"
    if not REPOSITORY_RE.match(repository):
        raise ValidationFailed("invalid_image_reference",
                               f"'{value}': '{repository}' is not a repository name (lowercase, '/'-separated).",
                               field=field)
    return ImageReference(registry=registry, repository=repository, tag=tag, digest=digest)


# --- documents ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: Platform | None = None  # None: absent or not a runnable platform (attestations)
    platform_text: str = ""  # as the index spelled it, for messages


@dataclass(frozen=True)
class Manifest:
    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]


@dataclass(frozen=True)
class Index:
    media_type: str
    manifests: tuple[Descriptor, ...]

    def offered(self) -> list[str]:
        return [d.platform_text or "unspecified" for d in self.manifests]


def _malformed(detail: str) -> ValidationFailed:
    return ValidationFailed("manifest_malformed", detail, field="manifest")


def _descriptor(value: object, where: str) -> Descriptor:
    if not isinstance(value, dict):
        raise _malformed(f"{where} is not a descriptor object.")
    media_type, digest, size = value.get("mediaType"), value.get("digest"), value.get("size")
    if not isinstance(media_type, str) or not media_type:
        raise _malformed(f"{where} has no mediaType.")
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise _malformed(f"{where} has no sha256 digest.")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _malformed(f"{where} has no size.")
    platform, text = None, ""
    raw = value.get("platform")
    if raw is not None:
        if not isinstance(raw, dict) or not isinstance(raw.get("os"), str) or not isinstance(
                raw.get("architecture"), str):
            raise _malformed(f"{where}.platform needs string 'os' and 'architecture'.")
        variant = raw.get("variant") or ""
        if not isinstance(variant, str):
            raise _malformed(f"{where}.platform.variant must be a string.")
        text = "/".join(p for p in (raw["os"], raw["architecture"], variant) if p)
        platform = _platform_or_none(raw["os"], raw["architecture"], variant)
    return Descriptor(media_type=media_type, digest=digest, size=size, platform=platform, platform_text=text)


def _platform_or_none(os_name: str, arch: str, variant: str) -> Platform | None:
    try:
        return parse_platform("/".join(p for p in (os_name, arch, variant) if p))
    except PlatformError:
        return None


def parse_document(data: bytes, content_type: str = "") -> Manifest | Index:
    """An image manifest or an index / manifest list, validated; anything else is ``manifest_malformed``
    or ``manifest_media_type_unsupported``. The document's own ``mediaType`` wins over the header."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise _malformed(f"The manifest is larger than {MAX_MANIFEST_BYTES} bytes.")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise _malformed("The manifest is not JSON.") from None
    if not isinstance(doc, dict):
        raise _malformed("The manifest is not a JSON object.")
    if doc.get("schemaVersion") != 2:
        raise _malformed("Only schemaVersion 2 manifests are supported.")
    media_type = doc.get("mediaType") or content_type.split(";")[0].strip()
    if not media_type:
        media_type = OCI_INDEX if "manifests" in doc else OCI_MANIFEST
    if media_type in INDEX_TYPES:
        entries = doc.get("manifests")
        if not isinstance(entries, list) or len(entries) > MAX_INDEX_ENTRIES:
            raise _malformed(f"An index needs a 'manifests' list of at most {MAX_INDEX_ENTRIES} entries.")
        return Index(media_type=media_type,
                     manifests=tuple(_descriptor(e, f"manifests[{i}]") for i, e in enumerate(entries)))
    if media_type in MANIFEST_TYPES:
        layers = doc.get("layers")
        if not isinstance(layers, list):
            raise _malformed("An image manifest needs a 'layers' list.")
        return Manifest(media_type=media_type, config=_descriptor(doc.get("config"), "config"),
                        layers=tuple(_descriptor(e, f"layers[{i}]") for i, e in enumerate(layers)))
    raise ValidationFailed("manifest_media_type_unsupported",
                           f"'{media_type}' is neither an OCI/Docker image manifest nor an index.", field="manifest")


def platform_from_config(data: bytes) -> Platform | None:
    """The platform an image config declares (``os``/``architecture``/``variant``), or None when the
    config is unreadable or names no real platform: unknown, never guessed."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    os_name, arch, variant = doc.get("os"), doc.get("architecture"), doc.get("variant") or ""
    if not isinstance(os_name, str) or not isinstance(arch, str) or not isinstance(variant, str):
        return None
    return _platform_or_none(os_name, arch, variant)


# --- resolution ---------------------------------------------------------------------------------------

def _key(platform: Platform) -> tuple[str, str, str]:
    """Compare like with like: an implied variant (arm → v7) is made explicit."""
    return platform.os, platform.arch, platform.variant or IMPLIED_VARIANTS.get(platform.arch, "")


def runnable_variants(platform: Platform) -> list[tuple[str, str, str]]:
    """What a Grove reporting ``platform`` can run, best first (its own variant, then older ones)."""
    os_name, arch, variant = _key(platform)
    ladder = VARIANT_LADDERS.get(arch)
    if ladder is None or variant not in ladder:
        return [(os_name, arch, variant)]
    return [(os_name, arch, v) for v in ladder[ladder.index(variant):]]


def can_run(grove_platform: Platform, artifact_platform: Platform) -> bool:
    return _key(artifact_platform) in runnable_variants(grove_platform)


@dataclass(frozen=True)
class Resolution:
    descriptor: Descriptor
    platform: Platform
    matched: str  # "grove:<platform>" or "fallback:<platform>": which wanted platform chose it
    offered: list[str] = field(default_factory=list)


def usable_platforms(values: list) -> list[Platform]:
    """The Grove's reported platforms that are real ones, in its order (bad entries are skipped)."""
    out: list[Platform] = []
    for value in values or []:
        try:
            platform = parse_platform(value)
        except PlatformError:
            continue
        if platform not in out:
            out.append(platform)
    return out


def resolve_index(index: Index, *, grove_platforms: list, fallback: list, grove: str = "the Grove") -> Resolution:
    """The index entry to run on a Grove: first match in the Grove's reported order (variant-aware),
    or in ``fallback`` order when the Grove reports no usable platform. No match: ``no_matching_platform``
    listing what the index offers and what the Grove runs."""
    wanted = usable_platforms(grove_platforms)
    source = "grove"
    if not wanted:
        wanted, source = usable_platforms(fallback), "fallback"
    images = [d for d in index.manifests if d.platform is not None and d.media_type in MANIFEST_TYPES]
    for platform in wanted:
        for candidate in runnable_variants(platform):
            for descriptor in images:
                if _key(descriptor.platform) == candidate:
                    return Resolution(descriptor=descriptor, platform=descriptor.platform,
                                      matched=f"{source}:{platform}", offered=index.offered())
    runs = ", ".join(str(p) for p in wanted) or "no platform"
    raise Conflict(
        "no_matching_platform",
        f"The index offers {', '.join(index.offered()) or 'no manifests'}; {grove} runs {runs}"
        f"{' (fallback: the Grove reports no usable platform)' if source == 'fallback' else ''}.",
        field="grove", extra={"offered": index.offered(), "grove_platforms": [str(p) for p in wanted],
                              "platform_source": source},
    )

