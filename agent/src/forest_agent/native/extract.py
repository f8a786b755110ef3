"""Safe tar extraction into a directory the caller owns; refuses with a stable code on the first
member that could write, link or point outside it.

Refused: absolute names, `..` components, symlinks whose target resolves outside the root, hard
links to anything but a regular file already extracted, device files and FIFOs, more than
`max_files` members, more than `max_total_bytes` of content, duplicate names. Files are created with
O_EXCL|O_NOFOLLOW so nothing is written through a symlink, and every parent directory is checked
with realpath, so a chain of in-tree symlinks cannot lead a write out. A final pass re-checks every
symlink, because a later member can change what an earlier link resolves to.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from forest_agent.errors import BundleRefused

_COPY_CHUNK = 1 << 20


class Readable(Protocol):
    """A forward-only byte stream: a file, or the bundle download feeding chunks as they arrive."""

    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True)
class ExtractLimits:
    max_total_bytes: int = 2 * 1024**3
    max_files: int = 100_000


@dataclass(frozen=True)
class ExtractResult:
    files: int
    total_bytes: int


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _member_parts(name: str) -> tuple[str, ...]:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise BundleRefused(f"bundle entry {name!r} has an absolute path", code="bundle_path_escape")
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts:
        raise BundleRefused(f"bundle entry {name!r} climbs out with '..'", code="bundle_path_escape")
    if any("\0" in p for p in parts):
        raise BundleRefused(f"bundle entry {name!r} has a NUL byte", code="bundle_path_escape")
    return parts


def extract_tar(source: Path | Readable, dest: Path, limits: ExtractLimits) -> ExtractResult:
    """Extract a tar (plain, gz, bz2 or xz) from a path or a forward-only stream into `dest`."""
    root = os.path.realpath(dest)
    seen: set[tuple[str, ...]] = set()
    regular: set[tuple[str, ...]] = set()
    symlinks: list[str] = []
    verified: set[str] = {root}
    total = 0
    count = 0
    with _open(source) as tar:
        try:
            for member in tar:
                count += 1
                if count > limits.max_files:
                    raise BundleRefused(
                        f"bundle has more than {limits.max_files} entries", code="bundle_too_many_files"
                    )
                parts = _member_parts(member.name)
                if not parts:
                    continue  # "./" itself
                if parts in seen and not member.isdir():
                    raise BundleRefused(
                        f"bundle entry {member.name!r} appears twice", code="bundle_path_escape"
                    )
                seen.add(parts)
                target = os.path.join(root, *parts)
                parent = os.path.dirname(target)
                if member.isdir():
                    _make_dirs(root, target, verified)
                    continue
                if not (member.isfile() or member.issym() or member.islnk()):
                    raise BundleRefused(
                        f"bundle entry {member.name!r} is a device, FIFO or other special file",
                        code="bundle_special_file",
                    )
                _make_dirs(root, parent, verified)
                if member.issym():
                    _symlink(root, parent, target, member)
                    symlinks.append(target)
                elif member.islnk():
                    link_parts = _member_parts(member.linkname)
                    if link_parts not in regular:
                        raise BundleRefused(
                            f"bundle hard link {member.name!r} points at {member.linkname!r}, "
                            "which is not a regular file earlier in the bundle",
                            code="bundle_path_escape",
                        )
                    os.link(os.path.join(root, *link_parts), target, follow_symlinks=False)
                else:
                    total += member.size
                    if total > limits.max_total_bytes:
                        raise BundleRefused(
                            f"bundle content exceeds {limits.max_total_bytes} bytes", code="bundle_too_large"
                        )
                    _write_file(tar, member, target)
                    regular.add(parts)
        except (tarfile.TarError, EOFError, OSError) as exc:
            if isinstance(exc, FileExistsError):
                raise BundleRefused(
                    f"bundle entry collides with an existing path: {exc.filename}", code="bundle_path_escape"
                ) from exc
            raise BundleRefused(f"bundle archive is corrupt: {exc}", code="bundle_unreadable") from exc
    for link in symlinks:
        if not _inside(root, os.path.realpath(link)):
            raise BundleRefused(
                f"bundle symlink {os.path.relpath(link, root)!r} resolves outside the bundle",
                code="bundle_path_escape",
            )
    return ExtractResult(files=count, total_bytes=total)


def _open(source: Path | Readable) -> tarfile.TarFile:
    try:
        if isinstance(source, Path):
            return tarfile.open(source, mode="r:*")
        return tarfile.open(fileobj=_decompressing(source), mode="r:")
    except (tarfile.TarError, OSError) as exc:
        raise BundleRefused(f"bundle is not a readable tar archive: {exc}", code="bundle_unreadable") from exc


class _Peeked(io.RawIOBase):
    """A forward-only stream with its first bytes pushed back (after sniffing the compression)."""

    def __init__(self, head: bytes, rest: Readable) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _decompressing(stream: Readable) -> BinaryIO:
    """Wrap a forward-only stream in the right decompressor. gzip/bz2/xz file objects offer the
    tell() and forward seek() that tarfile's random-access mode needs, without tarfile's stream
    mode, which re-copies its whole decompression buffer on every header read."""
    head = stream.read(6)
    raw = io.BufferedReader(_Peeked(head, stream), buffer_size=_COPY_CHUNK)
    if head.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if head.startswith(b"BZh"):
        return bz2.BZ2File(raw)  # type: ignore[return-value]
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)  # type: ignore[return-value]
    return _ForwardSeekable(raw)  # type: ignore[return-value]


class _ForwardSeekable(io.RawIOBase):
    """An uncompressed tar stream with tell() and forward-only seek() for tarfile."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self._pos += len(data)
        return data

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        target = offset if whence == 0 else self._pos + offset
        if whence not in (0, 1) or target < self._pos:
            raise OSError("bundle stream cannot seek backwards")
        while self._pos < target:
            if not self.read(min(_COPY_CHUNK, target - self._pos)):
                break
        return self._pos


def _make_dirs(root: str, directory: str, verified: set[str]) -> None:
    """Create `directory` (and parents) inside root, refusing any route out through a symlink.

    `verified` caches directories already checked: extraction never deletes or replaces a path
    (O_EXCL files, symlink() on an existing name fails), so a directory that resolved inside the
    root with every component present keeps doing so. This keeps per-file cost to one open().
    """
    if directory in verified:
        return
    if not _inside(root, directory):
        raise BundleRefused("bundle directory outside the root", code="bundle_path_escape")
    rel = os.path.relpath(directory, root)
    current = root
    for part in [] if rel == "." else rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if stat.S_ISLNK(st.st_mode):
            # Following an in-tree link is fine only if it really lands in the tree.
            if not _inside(root, os.path.realpath(current)):
                raise BundleRefused(
                    f"bundle path {rel!r} goes through a symlink that leaves the bundle",
                    code="bundle_path_escape",
                )
        elif not stat.S_ISDIR(st.st_mode):
            raise BundleRefused(
                f"bundle path {rel!r} needs a directory where a file is", code="bundle_path_escape"
            )
    if not _inside(root, os.path.realpath(directory)):
        raise BundleRefused("bundle directory resolves outside the root", code="bundle_path_escape")
    verified.add(directory)


def _symlink(root: str, parent: str, target: str, member: tarfile.TarInfo) -> None:
    link = member.linkname
    if not link or link.startswith("/"):
        raise BundleRefused(
            f"bundle symlink {member.name!r} has an absolute target {link!r}", code="bundle_path_escape"
        )
    resolved = os.path.realpath(os.path.join(parent, link))
    if not _inside(root, resolved):
        raise BundleRefused(
            f"bundle symlink {member.name!r} -> {link!r} points outside the bundle", code="bundle_path_escape"
        )
    os.symlink(link, target)


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
    # Keep the owner's execute bit, drop setuid/setgid/sticky and anything group/world-writable.
    mode = 0o755 if member.mode & 0o100 else 0o644
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        if member.sparse is not None:
            source = tar.extractfile(member)
            while source is not None and (chunk := source.read(_COPY_CHUNK)):
                out.write(chunk)
            return
        # Sequential read straight from the decompressed stream, as tarfile's own extraction does;
        # it raises ReadError on a truncated member.
        tar.fileobj.seek(member.offset_data)
        # tarfile's own copy loop (not in typeshed: undocumented, but the one its extraction uses)
        tarfile.copyfileobj(tar.fileobj, out, member.size, tarfile.ReadError, _COPY_CHUNK)  # type: ignore[attr-defined]
