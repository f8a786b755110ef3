"""Pure artifact rules, no database: image references, manifest/index parsing, index resolution in the
Grove's order (variant-aware, with the fallback), config platforms, object-key scope, platform fit."""
from __future__ import annotations

import json

import pytest

from apps.artifacts import oci, rules
from apps.artifacts.vocabulary import StorageKind, is_container_image
from apps.core.errors import ForestError

D = {c: "sha256:" + c * 64 for c in "abcdef0123"}


def entry(platform: str | None, digest: str, media_type: str = oci.OCI_MANIFEST) -> dict:
    item = {"mediaType": media_type, "digest": digest, "size": 100}
    if platform:
        os_name, arch, *variant = platform.split("/")
        item["platform"] = {"os": os_name, "architecture": arch, **({"variant": variant[0]} if variant else {})}
    return item


def index(*entries: dict) -> oci.Index:
    return oci.parse_document(json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX,
                                          "manifests": list(entries)}).encode())


MULTI = index(entry("linux/amd64", D["a"]), entry("linux/arm64/v8", D["b"]), entry("linux/arm/v7", D["c"]),
              entry("unknown/unknown", D["d"]))


@pytest.mark.parametrize(("value", "expected"), [
    ("127.0.0.1:5000/team/app:1.0", ("127.0.0.1:5000", "team/app", "1.0", "")),
    ("registry.example/app@" + D["a"], ("registry.example", "app", "", D["a"])),
    ("localhost/app:v1@" + D["b"], ("localhost", "app", "v1", D["b"])),
    ("nginx", ("registry-1.docker.io", "library/nginx", "", "")),
    ("team/app:2", ("registry-1.docker.io", "team/app", "2", "")),
])
def test_references_parse_like_docker(value, expected):
    ref = oci.parse_reference(value)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == expected


@pytest.mark.parametrize("value", ["", "UPPER/case", "app@sha256:short", "app:bad tag", "a" * 600, "app:-x", None])
def test_bad_references_are_coded(value):
    with pytest.raises(ForestError) as exc:
        oci.parse_reference(value)
    assert exc.value.code == "invalid_image_reference"


def test_resolution_follows_the_groves_order_first_match_wins():
    assert oci.resolve_index(MULTI, grove_platforms=["linux/arm64", "linux/amd64"], fallback=[]).descriptor.digest \
        == D["b"]
    assert oci.resolve_index(MULTI, grove_platforms=["linux/amd64", "linux/arm64"], fallback=[]).descriptor.digest \
        == D["a"]
    found = oci.resolve_index(MULTI, grove_platforms=["darwin/arm64", "linux/arm/v7"], fallback=[])
    assert (found.descriptor.digest, str(found.platform), found.matched) == (D["c"], "linux/arm/v7",
                                                                           "grove:linux/arm/v7")


def test_resolution_is_variant_aware():
    # linux/arm64 is arm64/v8, spelled either way on both sides.
    assert oci.resolve_index(MULTI, grove_platforms=["linux/arm64/v8"], fallback=[]).descriptor.digest == D["b"]
    plain = index(entry("linux/arm64", D["e"]), entry("linux/arm/v6", D["f"]))
    assert oci.resolve_index(plain, grove_platforms=["linux/arm64/v8"], fallback=[]).descriptor.digest == D["e"]
    # an armv7 Grove runs v6 when no v7 is offered; a v6 Grove never gets v7.
    assert oci.resolve_index(plain, grove_platforms=["linux/arm/v7"], fallback=[]).descriptor.digest == D["f"]
    with pytest.raises(ForestError) as exc:
        oci.resolve_index(MULTI, grove_platforms=["linux/arm/v6"], fallback=[])
    assert exc.value.code == "no_matching_platform"
    # the best variant wins inside one preference slot
    both = index(entry("linux/arm/v6", D["0"]), entry("linux/arm/v7", D["1"]))
    assert oci.resolve_index(both, grove_platforms=["linux/arm/v7"], fallback=[]).descriptor.digest == D["1"]


def test_no_match_lists_what_the_index_offers_and_what_the_grove_runs():
    with pytest.raises(ForestError) as exc:
        oci.resolve_index(MULTI, grove_platforms=["linux/s390x", "darwin/arm64"], fallback=["linux/amd64"],
                          grove="Grove mainframe")
    assert exc.value.code == "no_matching_platform" and exc.value.status == 409
    assert exc.value.extra["offered"] == ["linux/amd64", "linux/arm64/v8", "linux/arm/v7", "unknown/unknown"]
    assert exc.value.extra["grove_platforms"] == ["linux/s390x", "darwin/arm64"]
    assert "Grove mainframe runs linux/s390x, darwin/arm64" in exc.value.detail


def test_fallback_applies_only_when_the_grove_reports_no_usable_platform():
    found = oci.resolve_index(MULTI, grove_platforms=[], fallback=["linux/amd64"])
    assert (found.descriptor.digest, found.matched) == (D["a"], "fallback:linux/amd64")
    found = oci.resolve_index(MULTI, grove_platforms=["not/a-platform", 7], fallback=["linux/arm64"])
    assert found.matched == "fallback:linux/arm64"
    with pytest.raises(ForestError) as exc:
        oci.resolve_index(MULTI, grove_platforms=[], fallback=[])
    assert exc.value.extra["platform_source"] == "fallback"


def test_attestation_and_nested_entries_never_match():
    odd = index(entry("unknown/unknown", D["a"]), entry("linux/amd64", D["b"], media_type=oci.OCI_INDEX))
    with pytest.raises(ForestError):
        oci.resolve_index(odd, grove_platforms=["linux/amd64"], fallback=[])


@pytest.mark.parametrize(("body", "code"), [
    (b"not json", "manifest_malformed"),
    (b"[]", "manifest_malformed"),
    (json.dumps({"schemaVersion": 1}).encode(), "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX, "manifests": "x"}).encode(), "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX,
                 "manifests": [{"mediaType": oci.OCI_MANIFEST, "digest": "md5:1", "size": 1}]}).encode(),
     "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX,
                 "manifests": [{"mediaType": oci.OCI_MANIFEST, "digest": D["a"], "size": -1}]}).encode(),
     "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_INDEX,
                 "manifests": [{**entry(None, D["a"]), "platform": {"os": 1}}]}).encode(), "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST, "config": {}, "layers": []}).encode(),
     "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": oci.OCI_MANIFEST, "layers": None}).encode(), "manifest_malformed"),
    (json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.cncf.helm.config"}).encode(),
     "manifest_media_type_unsupported"),
    (b"{" + b" " * (oci.MAX_MANIFEST_BYTES + 1) + b"}", "manifest_malformed"),
])
def test_malformed_documents_are_coded(body, code):
    with pytest.raises(ForestError) as exc:
        oci.parse_document(body)
    assert exc.value.code == code


def test_config_platform_is_read_or_unknown_never_guessed():
    assert str(oci.platform_from_config(b'{"os": "linux", "architecture": "arm64", "variant": "v8"}')) == "linux/arm64"
    assert str(oci.platform_from_config(b'{"os": "linux", "architecture": "arm", "variant": "v7"}')) == "linux/arm/v7"
    for unreadable in (b"garbage", b"[]", b'{"os": "linux"}', b'{"os": "plan9", "architecture": "amd64"}',
                       b'{"os": "linux", "architecture": 5}'):
        assert oci.platform_from_config(unreadable) is None


@pytest.mark.parametrize("key", ["../other-run/x", "a/../../b", "/etc/passwd", "a\\b", "a//b", "./a", "a/."])
def test_object_keys_cannot_escape_their_run_prefix(key):
    with pytest.raises(ForestError) as exc:
        rules.run_object_key(run_id="0f" * 16, node_id="build", key=key)
    assert exc.value.code == "blob_key_out_of_scope"


def test_object_keys_are_plain_segments_under_the_run():
    run = "0f0f0f0f-0f0f-0f0f-0f0f-0f0f0f0f0f0f"
    key = rules.run_object_key(run_id=run, node_id="build", key="logs/out.tar.gz")
    assert key == f"runs/{run}/build/logs/out.tar.gz"
    for bad, code in (("x" * 500, "invalid_blob_key"), ("a b", "invalid_blob_key"), ("", "invalid_blob_key")):
        with pytest.raises(ForestError) as exc:
            rules.run_object_key(run_id=run, node_id="build", key=bad)
        assert exc.value.code == code
    with pytest.raises(ForestError) as exc:
        rules.run_object_key(run_id="../x", node_id="build", key="a")
    assert exc.value.code == "invalid_run_id"


def test_platform_fit_is_variant_aware_and_unknown_is_not_a_mismatch():
    assert rules.platform_fit(artifact_platform="linux/arm64", required=["linux/arm64/v8"]).fits is True
    assert rules.platform_fit(artifact_platform="linux/arm/v6", required=["linux/arm/v7"]).fits is True
    assert rules.platform_fit(artifact_platform="linux/amd64", required=["linux/arm64", "darwin/arm64"]).fits is False
    assert rules.platform_fit(artifact_platform="", required=["linux/amd64"]).fits is None
    assert rules.platform_fit(artifact_platform="linux/amd64", required=[]).fits is True


def test_only_an_oci_registry_artifact_is_a_container_image():
    assert [k for k in StorageKind if is_container_image(k)] == [StorageKind.OCI_REGISTRY]
