"""Attack tests: hostile or damaged bundles are refused with a stable code, and nothing is written
outside the generation directory. Real HTTP (stub Host blob endpoint), real Ed25519, real tar."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import httpx
import pytest
from helpers import Signer, digest_of, file_entry, make_tar, special_entry
from stub_host import StubHost

from forest_agent.errors import BundleRefused
from forest_agent.native.bundles import BundleInstaller, BundleLimits
from forest_agent.native.extract import ExtractLimits
from forest_agent.native.signing import TrustedKeys
from forest_agent.wire.messages import BundleRef

# One client for the module: building an httpx client (TLS context) per test is the slow part.
_HTTP = httpx.Client(timeout=10.0)


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


class Scene:
    """A workload area with a generation dir inside a sandbox; `outside()` lists everything else."""

    def __init__(self, tmp_path: Path, host: StubHost, signer: Signer) -> None:
        self.sandbox = tmp_path / "sandbox"
        self.sandbox.mkdir()
        (self.sandbox / "sentinel.txt").write_text("untouched")
        self.generation = self.sandbox / "workloads" / "app" / "generations" / "g1.partial"
        self.generation.mkdir(parents=True)
        self.host = host
        self.signer = signer
        signer.write_public(tmp_path / "keys")
        self.keys = TrustedKeys.load(keys_dir=tmp_path / "keys")
        self.before = self.outside()

    def outside(self) -> set[str]:
        return {p for p in snapshot(self.sandbox) if not p.startswith("workloads/app/generations/g1.partial")}

    def install(
        self,
        data: bytes,
        *,
        digest: str | None = None,
        signature: str | None = None,
        key_id: str | None = None,
        size: int | None = None,
        limits: BundleLimits | None = None,
    ) -> None:
        digest = digest or digest_of(data)
        ref = BundleRef(
            url=self.host.add_blob("b", data),
            digest=digest,
            size=size,
            signature=signature if signature is not None else self.signer.sign(digest),
            key_id=key_id or self.signer.key_id,
        )
        installer = BundleInstaller(
            keys=self.keys, limits=limits or BundleLimits(), http=_HTTP, platform="linux"
        )
        installer.install(ref, self.generation)


@pytest.fixture
def scene(tmp_path: Path, host: StubHost, signer: Signer) -> Scene:
    return Scene(tmp_path, host, signer)


def refused(scene: Scene, code: str, data: bytes, **kwargs: object) -> None:
    with pytest.raises(BundleRefused) as caught:
        scene.install(data, **kwargs)
    assert caught.value.code == code, caught.value.message
    assert scene.outside() == scene.before, "something was written outside the generation directory"
    assert (scene.sandbox / "sentinel.txt").read_text() == "untouched"


def test_a_good_bundle_installs(scene: Scene) -> None:
    scene.install(make_tar([file_entry("bin/server", b"#!/bin/sh\n", 0o755), file_entry("README", b"hi")]))
    app = scene.generation / "app"
    assert (app / "README").read_text() == "hi"
    assert os.access(app / "bin" / "server", os.X_OK)
    assert sorted(p.name for p in scene.generation.iterdir()) == ["app"]  # no archive copy left behind
    assert scene.outside() == scene.before


def test_tampered_bundle_digest_mismatch(scene: Scene) -> None:
    good = make_tar([file_entry("a", b"original")])
    tampered = make_tar([file_entry("a", b"tampered")])
    refused(scene, "bundle_digest_mismatch", tampered, digest=digest_of(good))
    assert not (scene.generation / "app").exists()


def test_signature_by_an_untrusted_key_is_invalid(scene: Scene) -> None:
    data = make_tar([file_entry("a", b"x")])
    impostor = Signer(scene.signer.key_id)
    refused(scene, "bundle_signature_invalid", data, signature=impostor.sign(digest_of(data)))


def test_signature_over_another_digest_is_invalid(scene: Scene) -> None:
    data = make_tar([file_entry("a", b"x")])
    refused(scene, "bundle_signature_invalid", data, signature=scene.signer.sign("sha256:" + "0" * 64))


def test_unknown_key_id(scene: Scene) -> None:
    refused(scene, "bundle_key_unknown", make_tar([file_entry("a", b"x")]), key_id="someone-else")


def test_garbage_signature_is_invalid(scene: Scene) -> None:
    refused(scene, "bundle_signature_invalid", make_tar([file_entry("a", b"x")]), signature="!!not base64!!")


def test_dot_dot_path(scene: Scene) -> None:
    refused(scene, "bundle_path_escape", make_tar([file_entry("../../../../escaped.txt", b"x")]))


def test_dot_dot_in_the_middle(scene: Scene) -> None:
    refused(scene, "bundle_path_escape", make_tar([file_entry("ok/../../escaped.txt", b"x")]))


def test_absolute_path(scene: Scene, tmp_path: Path) -> None:
    target = tmp_path / "sandbox" / "absolute.txt"
    refused(scene, "bundle_path_escape", make_tar([file_entry(str(target), b"x")]))
    assert not target.exists()


def test_symlink_pointing_outside(scene: Scene) -> None:
    refused(
        scene, "bundle_path_escape", make_tar([special_entry("link", tarfile.SYMTYPE, "../../../../../")])
    )


def test_absolute_symlink(scene: Scene) -> None:
    refused(scene, "bundle_path_escape", make_tar([special_entry("etc", tarfile.SYMTYPE, "/etc")]))


def test_write_through_a_symlink_escape(scene: Scene) -> None:
    # An in-tree link that a later link turns into an escape, then a file written through it.
    data = make_tar(
        [
            file_entry("d/keep", b"x"),
            special_entry("d/up", tarfile.SYMTYPE, ".."),  # -> app (inside)
            special_entry("hop", tarfile.SYMTYPE, "d/up/.."),  # -> generation dir (outside app)
            file_entry("hop/escaped.txt", b"x"),
        ]
    )
    refused(scene, "bundle_path_escape", data)
    assert not (scene.generation / "escaped.txt").exists()


def test_symlink_chain_that_only_escapes_once_complete(scene: Scene) -> None:
    data = make_tar(
        [
            special_entry("x", tarfile.SYMTYPE, "d/y/.."),  # lexically inside while d/y is missing
            special_entry("d/y", tarfile.SYMTYPE, "../.."),  # now x resolves outside
        ]
    )
    refused(scene, "bundle_path_escape", data)


def test_hardlink_to_a_file_outside(scene: Scene) -> None:
    refused(
        scene,
        "bundle_path_escape",
        make_tar([special_entry("passwd", tarfile.LNKTYPE, "../../../../../../etc/passwd")]),
    )


def test_hardlink_to_an_absolute_path(scene: Scene) -> None:
    refused(scene, "bundle_path_escape", make_tar([special_entry("passwd", tarfile.LNKTYPE, "/etc/passwd")]))


@pytest.mark.parametrize("kind", [tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE])
def test_device_files_and_fifos(scene: Scene, kind: bytes) -> None:
    refused(scene, "bundle_special_file", make_tar([special_entry("dev", kind)]))


def test_download_larger_than_the_limit(scene: Scene) -> None:
    data = make_tar([file_entry("big", os.urandom(64 * 1024))])
    refused(scene, "bundle_too_large", data, limits=BundleLimits(max_download_bytes=16 * 1024))


def test_declared_size_over_the_limit_is_refused_before_downloading(scene: Scene) -> None:
    data = make_tar([file_entry("a", b"x")])
    refused(scene, "bundle_too_large", data, size=10**12, limits=BundleLimits(max_download_bytes=10**6))


def test_size_mismatch_with_what_host_declared(scene: Scene) -> None:
    data = make_tar([file_entry("a", b"x")])
    refused(scene, "bundle_size_mismatch", data, size=len(data) + 1)


def test_extracted_content_over_the_limit(scene: Scene) -> None:
    # A gzip bomb in miniature: 4 MiB of zeros compresses to a few KiB.
    data = make_tar([file_entry("zeros", bytes(4 * 1024 * 1024))])
    refused(
        scene,
        "bundle_too_large",
        data,
        limits=BundleLimits(extract=ExtractLimits(max_total_bytes=1024 * 1024, max_files=10)),
    )


def test_too_many_files(scene: Scene) -> None:
    data = make_tar([file_entry(f"f{i}", b"x") for i in range(20)])
    refused(
        scene,
        "bundle_too_many_files",
        data,
        limits=BundleLimits(extract=ExtractLimits(max_total_bytes=10**6, max_files=10)),
    )


def test_duplicate_entry_cannot_overwrite(scene: Scene) -> None:
    refused(scene, "bundle_path_escape", make_tar([file_entry("a", b"1"), file_entry("a", b"2")]))


def test_not_a_tar(scene: Scene) -> None:
    refused(scene, "bundle_unreadable", b"this is not a tar archive at all" * 10)


def test_download_error_status(scene: Scene, signer: Signer) -> None:
    ref = BundleRef(
        url=f"{scene.host.url}/blobs/missing",
        digest="sha256:" + "0" * 64,
        size=None,
        signature=signer.sign("sha256:" + "0" * 64),
        key_id=signer.key_id,
    )
    with pytest.raises(BundleRefused) as caught:
        BundleInstaller(keys=scene.keys, limits=BundleLimits(), http=_HTTP, platform="linux").install(
            ref, scene.generation
        )
    assert caught.value.code == "bundle_download_failed"


def test_setuid_bits_are_dropped(scene: Scene) -> None:
    scene.install(make_tar([file_entry("bin/tool", b"#!/bin/sh\n", 0o6777)]))
    mode = (scene.generation / "app" / "bin" / "tool").stat().st_mode & 0o7777
    assert mode == 0o755


def test_an_unsigned_bundle_is_refused_before_anything_is_fetched(scene: Scene, signer: Signer) -> None:
    # The URL points at a closed port: had the agent tried to download, the code would differ.
    ref = BundleRef(
        url="http://127.0.0.1:9/never",
        digest="sha256:" + "1" * 64,
        size=None,
        signature=Signer("other").sign("sha256:" + "1" * 64),
        key_id=signer.key_id,
    )
    with pytest.raises(BundleRefused) as caught:
        BundleInstaller(keys=scene.keys, limits=BundleLimits(), http=_HTTP, platform="linux").install(
            ref, scene.generation
        )
    assert caught.value.code == "bundle_signature_invalid"
    assert list(scene.generation.iterdir()) == []
