"""Safety checks for users' model archives (zip), shared by the API and the learner runner.

`check_archive` refuses, before anything is stored or unpacked: non-zips, oversized archives,
too many entries, absolute / drive-letter / backslash / `..` paths (zip-slip), links and other
special files, encrypted entries, duplicate or colliding names, overlapping entries, and zip
bombs. It does not trust the sizes the headers declare: every stored or deflated entry is
decompressed from its raw bytes with an output budget, so an entry that inflates past its
declared size (a forged header) is caught as soon as it does.

`safe_extract` re-runs the checks and unpacks into a directory without ever writing outside it.

Both raise `ArchiveRefused(code, detail)`; the API maps it to an HTTP error on field `model`.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from storage.settings import Settings

_CHUNK = 64 * 1024
# below this many unpacked bytes an entry's compression ratio is not judged: small files of
# repeated text compress very well and are harmless
RATIO_FLOOR_BYTES = 1024 * 1024
# a central directory entry is 46 bytes plus its name, extra field and comment; allow 1 KiB
# per permitted file before parsing it at all
_CD_BYTES_PER_FILE = 1024

_FIX_RECREATE = (
    "re-create the zip from inside your model directory, e.g. cd model && zip -r ../model.zip ."
)

_EOCD = struct.Struct("<4s4H2LH")
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_DRIVE = re.compile(r"[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SUPPORTED = {
    zipfile.ZIP_STORED: "stored",
    zipfile.ZIP_DEFLATED: "deflate",
    zipfile.ZIP_BZIP2: "bzip2",
    zipfile.ZIP_LZMA: "lzma",
}


class ArchiveRefused(Exception):
    """The archive is refused; `code` is machine-readable, `detail` names the reason and fix."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class ArchiveLimits:
    max_bytes: int = 256 * 1024 * 1024
    max_files: int = 10_000
    max_unpacked_bytes: int = 2 * 1024 * 1024 * 1024
    max_compression_ratio: float = 200.0

    @classmethod
    def from_settings(cls, settings: Settings) -> ArchiveLimits:
        return cls(
            max_bytes=settings.max_archive_bytes,
            max_files=settings.max_archive_files,
            max_unpacked_bytes=settings.max_archive_unpacked_bytes,
            max_compression_ratio=settings.max_compression_ratio,
        )


@dataclass(frozen=True)
class ArchiveSummary:
    files: int
    unpacked_bytes: int


@dataclass(frozen=True)
class _Entry:
    info: zipfile.ZipInfo
    path: str  # normalized: "/"-separated, relative; "" only for a "./" directory entry
    is_dir: bool


Source = str | os.PathLike[str] | IO[bytes]


def _show(name: str) -> str:
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


def _mib(n: float) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


# --- opening ------------------------------------------------------------------------------


@contextmanager
def _opened(source: Source) -> Iterator[IO[bytes]]:
    if isinstance(source, str | os.PathLike):
        with open(source, "rb") as fh:
            yield fh
        return
    start = source.tell()
    try:
        yield source
    finally:
        source.seek(start)


def _size(fh: IO[bytes]) -> int:
    return fh.seek(0, io.SEEK_END)


def _directory_bounds(fh: IO[bytes], size: int) -> tuple[int, int] | None:
    """(declared entry count, central directory size) from the end record, or None."""
    tail_len = min(size, _EOCD.size + 0xFFFF)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _EOCD.size:
        return None
    _, _, _, _, count, cd_size, cd_offset, _ = _EOCD.unpack_from(tail, at)
    if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_offset == 0xFFFFFFFF:
        record_at = size - tail_len + at - _EOCD64_LOCATOR.size - _EOCD64.size
        if record_at >= 0:
            fh.seek(record_at)
            raw = fh.read(_EOCD64.size)
            if len(raw) == _EOCD64.size and raw[:4] == b"PK\x06\x06":
                fields = _EOCD64.unpack(raw)
                count, cd_size = fields[7], fields[8]
    return count, cd_size


def _open_zip(fh: IO[bytes], limits: ArchiveLimits) -> tuple[zipfile.ZipFile, int]:
    size = _size(fh)
    if size > limits.max_bytes:
        raise ArchiveRefused(
            "archive_too_large",
            f"model archive is {_mib(size)}, above the {_mib(limits.max_bytes)} limit; leave "
            "data sets out of the model archive and upload them as training data "
            "(PUT /v2/data/...) instead",
        )
    bounds = _directory_bounds(fh, size)
    if bounds is not None:
        count, cd_size = bounds
        if count > limits.max_files:
            raise _too_many(f"holds {count} entries", limits)
        if cd_size > limits.max_files * _CD_BYTES_PER_FILE:
            raise _too_many(f"has a {_mib(cd_size)} directory of entries", limits)
    fh.seek(0)
    try:
        zf = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise ArchiveRefused(
            "invalid_archive",
            f"model archive is not a readable zip file ({exc}); send a .zip of your model "
            f"directory: {_FIX_RECREATE}",
        ) from None
    except (struct.error, UnicodeDecodeError, NotImplementedError, OverflowError) as exc:
        raise ArchiveRefused(
            "invalid_archive",
            f"model archive is not a readable zip file ({type(exc).__name__}); {_FIX_RECREATE}",
        ) from None
    return zf, size


def _too_many(what: str, limits: ArchiveLimits) -> ArchiveRefused:
    return ArchiveRefused(
        "too_many_files",
        f"model archive {what}, more than the {limits.max_files}-file limit allows; "
        "leave data sets and generated files out of the model archive (upload data as "
        "training data instead)",
    )


# --- names --------------------------------------------------------------------------------


def _normalize(info: zipfile.ZipInfo) -> tuple[str, bool]:
    raw = info.orig_filename
    name = info.filename
    if _CONTROL.search(raw):
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(raw)} has control characters in its name; rename the "
            f"file and {_FIX_RECREATE}",
        )
    if "\\" in name:
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(name)} uses backslashes in its path; re-create the "
            "zip with a tool that writes / separators (zip -r, python -m zipfile -c, or "
            "PowerShell 7's Compress-Archive)",
        )
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(name)} has an absolute path; every path must be "
            f"relative to the archive root: {_FIX_RECREATE}",
        )
    is_dir = name.endswith("/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(name)} climbs out of the archive with '..' "
            f"(zip-slip); every path must stay inside the archive: {_FIX_RECREATE}",
        )
    if not parts:
        if is_dir:
            return "", True
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(name)} has no file name; {_FIX_RECREATE}",
        )
    if any(len(p.encode("utf-8", "surrogateescape")) > 255 for p in parts) or len(name) > 4096:
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(name)} has a path too long to unpack; shorten it",
        )
    return "/".join(parts), is_dir


def _check_type(info: zipfile.ZipInfo, path: str) -> None:
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind in (0, stat.S_IFREG, stat.S_IFDIR):
        return
    what = "a symbolic link" if kind == stat.S_IFLNK else "a special file (device, pipe or socket)"
    raise ArchiveRefused(
        "link_in_archive",
        f"model archive entry {_show(path)} is {what}; only regular files and directories are "
        "allowed: replace links with the files they point to (zip -r without -y does that)",
    )


def _check_flags(info: zipfile.ZipInfo, path: str) -> None:
    if info.flag_bits & 0x1 or info.flag_bits & 0x40:
        raise ArchiveRefused(
            "encrypted_entry",
            f"model archive entry {_show(path)} is encrypted; dlaas cannot read encrypted "
            "entries: create the zip without a password",
        )
    if info.compress_type not in _SUPPORTED:
        raise ArchiveRefused(
            "invalid_archive",
            f"model archive entry {_show(path)} uses compression method {info.compress_type}, "
            "which dlaas does not read; re-create the zip with deflate (the default of zip tools)",
        )


def _entries(zf: zipfile.ZipFile, limits: ArchiveLimits) -> list[_Entry]:
    infos = zf.infolist()
    if len(infos) > limits.max_files:
        raise _too_many(f"holds {len(infos)} entries", limits)
    entries: list[_Entry] = []
    files: set[str] = set()
    dirs: set[str] = set()
    for info in infos:
        path, is_dir = _normalize(info)
        _check_type(info, path)
        _check_flags(info, path)
        if is_dir:
            if path in files:
                raise _collision(path)
            dirs.add(path)
        else:
            if path in files or path in dirs:
                raise _collision(path)
            files.add(path)
        entries.append(_Entry(info, path, is_dir))
    # a file may not also be a parent directory of another entry ("a" and "a/b")
    for path in files | dirs:
        cut = path.rfind("/")
        while cut > 0:
            parent = path[:cut]
            if parent in files:
                raise _collision(parent)
            cut = parent.rfind("/")
    return entries


def _collision(path: str) -> ArchiveRefused:
    return ArchiveRefused(
        "duplicate_entry",
        f"model archive has more than one entry at {_show(path)} (after normalizing the "
        "path, or as both a file and a directory); keep one: "
        f"{_FIX_RECREATE}",
    )


# --- sizes and contents -------------------------------------------------------------------


def _bomb(detail: str) -> ArchiveRefused:
    return ArchiveRefused(
        "zip_bomb",
        f"model archive {detail}; this looks like a zip bomb. Leave large or generated data "
        "out of the model archive (upload it as training data instead)",
    )


def _corrupt(path: str, why: str) -> ArchiveRefused:
    return ArchiveRefused(
        "invalid_archive",
        f"model archive entry {_show(path)} is corrupt ({why}); {_FIX_RECREATE}",
    )


def _check_declared(entries: list[_Entry], size: int, limits: ArchiveLimits) -> int:
    total = 0
    for e in entries:
        if e.is_dir:
            continue
        declared = e.info.file_size
        total += declared
        if total > limits.max_unpacked_bytes:
            raise _bomb(
                f"declares more than {_mib(limits.max_unpacked_bytes)} unpacked "
                f"(limit max_archive_unpacked_bytes)"
            )
        if declared > RATIO_FLOOR_BYTES:
            ratio = declared / max(e.info.compress_size, 1)
            if ratio > limits.max_compression_ratio:
                raise _bomb(
                    f"entry {_show(e.path)} compresses {ratio:.0f}:1, above the "
                    f"{limits.max_compression_ratio:.0f}:1 limit"
                )
    if total > RATIO_FLOOR_BYTES and total / max(size, 1) > limits.max_compression_ratio:
        raise _bomb(
            f"unpacks to {total / max(size, 1):.0f} times its own size, above the "
            f"{limits.max_compression_ratio:.0f}:1 limit"
        )
    return total


def _data_offset(fh: IO[bytes], e: _Entry, size: int) -> int:
    offset = e.info.header_offset
    if offset < 0 or offset + _LOCAL_HEADER.size > size:
        raise _corrupt(e.path, "its header lies outside the file")
    fh.seek(offset)
    header = fh.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise _corrupt(e.path, "bad local header")
    fields = _LOCAL_HEADER.unpack(header)
    name_len, extra_len = fields[9], fields[10]
    local_name = fh.read(name_len)
    encoding = "utf-8" if e.info.flag_bits & 0x800 else "cp437"
    if local_name.decode(encoding, "replace") != e.info.orig_filename:
        raise ArchiveRefused(
            "unsafe_path",
            f"model archive entry {_show(e.info.orig_filename)} carries a different name in "
            "its local header; such archives unpack differently with different tools: "
            f"{_FIX_RECREATE}",
        )
    start = offset + _LOCAL_HEADER.size + name_len + extra_len
    if start + e.info.compress_size > size:
        raise _corrupt(e.path, "its data runs past the end of the file")
    return start


def _inflate(fh: IO[bytes], e: _Entry, budget: int) -> int:
    """Decompress one entry from its raw bytes; return the bytes it really unpacks to."""
    info = e.info
    declared = info.file_size
    produced = 0
    crc = 0
    left = info.compress_size
    inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None

    def account(out: bytes) -> None:
        nonlocal produced, crc
        produced += len(out)
        if produced > declared:
            raise _bomb(
                f"entry {_show(e.path)} unpacks to more than the {declared} bytes its header "
                "declares (a forged header)"
            )
        if produced > budget:
            raise _bomb(f"unpacks to more than {_mib(budget)} (limit max_archive_unpacked_bytes)")
        crc = zlib.crc32(out, crc)

    try:
        while left > 0:
            chunk = fh.read(min(_CHUNK, left))
            if not chunk:
                raise _corrupt(e.path, "truncated")
            left -= len(chunk)
            if inflater is None:
                account(chunk)
                continue
            data = chunk
            while data and not inflater.eof:
                account(inflater.decompress(data, _CHUNK))
                data = inflater.unconsumed_tail
            if inflater.eof:
                break
        if inflater is not None and not inflater.eof:
            account(inflater.flush())
            if not inflater.eof:
                raise _corrupt(e.path, "its compressed data ends early")
    except zlib.error as exc:
        raise _corrupt(e.path, f"deflate: {exc}") from None
    if produced != declared:
        raise _corrupt(e.path, f"unpacks to {produced} bytes, its header declares {declared}")
    if crc != info.CRC:
        raise _corrupt(e.path, "CRC mismatch")
    return produced


def _read_via_zipfile(zf: zipfile.ZipFile, e: _Entry, budget: int) -> int:
    """bzip2/lzma entries: zipfile stops at the declared size and checks the CRC."""
    produced = 0
    try:
        with zf.open(e.info) as member:
            while chunk := member.read(_CHUNK):
                produced += len(chunk)
                if produced > budget:
                    raise _bomb(
                        f"unpacks to more than {_mib(budget)} (limit max_archive_unpacked_bytes)"
                    )
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, LookupError) as exc:
        raise _corrupt(e.path, str(exc) or type(exc).__name__) from None
    return produced


def _verify_contents(
    zf: zipfile.ZipFile, fh: IO[bytes], entries: list[_Entry], size: int, limits: ArchiveLimits
) -> int:
    end_of_data = getattr(zf, "start_dir", size)
    ordered = sorted(entries, key=lambda e: e.info.header_offset)
    total = 0
    for i, e in enumerate(ordered):
        start = _data_offset(fh, e, size)
        end = start + e.info.compress_size
        following = ordered[i + 1].info.header_offset if i + 1 < len(ordered) else end_of_data
        if end > following:
            raise _bomb(
                f"entry {_show(e.path)} overlaps the next entry's data (entries sharing "
                "compressed data)"
            )
        if e.is_dir:
            continue
        budget = limits.max_unpacked_bytes - total
        if e.info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            fh.seek(start)
            total += _inflate(fh, e, budget)
        else:
            total += _read_via_zipfile(zf, e, budget)
    return total


def _check_open(
    zf: zipfile.ZipFile, fh: IO[bytes], size: int, limits: ArchiveLimits
) -> tuple[list[_Entry], ArchiveSummary]:
    entries = _entries(zf, limits)
    _check_declared(entries, size, limits)
    unpacked = _verify_contents(zf, fh, entries, size, limits)
    files = sum(1 for e in entries if not e.is_dir)
    return entries, ArchiveSummary(files=files, unpacked_bytes=unpacked)


def check_archive(source: Source, limits: ArchiveLimits) -> ArchiveSummary:
    """Check a model archive (a path or a seekable binary file) without unpacking it.

    A file object is left at the position it had. Raises `ArchiveRefused`.
    """
    with _opened(source) as fh:
        zf, size = _open_zip(fh, limits)
        with zf:
            return _check_open(zf, fh, size, limits)[1]


# --- unpacking ----------------------------------------------------------------------------


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _make_dirs(root: str, rel: str) -> str:
    """Create `root/rel` one component at a time, refusing any component that is a link."""
    current = root
    for part in rel.split("/") if rel else []:
        current = os.path.join(current, part)
        with suppress(FileExistsError):
            os.mkdir(current, 0o755)
        st = os.lstat(current)
        if not stat.S_ISDIR(st.st_mode):
            raise ArchiveRefused(
                "unsafe_path",
                f"model archive path {_show(rel)} meets an existing non-directory or link at "
                f"{_show(current)} while unpacking; unpack into an empty directory",
            )
    return current


def safe_extract(
    zip_path: Source, dest_dir: str | os.PathLike[str], limits: ArchiveLimits
) -> ArchiveSummary:
    """Check the archive, then unpack it into `dest_dir` (created if missing).

    Never writes outside `dest_dir`, never creates links, never follows a link while writing,
    keeps only the executable bit of file modes, and stops at the same unpacked-bytes budget.
    """
    root = os.path.realpath(dest_dir)
    os.makedirs(root, exist_ok=True)
    with _opened(zip_path) as fh:
        zf, size = _open_zip(fh, limits)
        with zf:
            entries, summary = _check_open(zf, fh, size, limits)
            written = 0
            for e in entries:
                if e.is_dir:
                    _make_dirs(root, e.path)
                    continue
                parent_rel, _, filename = e.path.rpartition("/")
                parent = _make_dirs(root, parent_rel)
                target = os.path.join(parent, filename)
                if not _inside(root, os.path.realpath(parent)):
                    raise ArchiveRefused(
                        "unsafe_path",
                        f"model archive entry {_show(e.path)} would be written outside the "
                        "destination; unpack into an empty directory",
                    )
                exec_bit = (e.info.external_attr >> 16) & 0o111
                flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
                try:
                    fd = os.open(target, flags, 0o755 if exec_bit else 0o644)
                except (IsADirectoryError, OSError) as exc:
                    if isinstance(exc, IsADirectoryError) or exc.errno == errno.ELOOP:
                        raise ArchiveRefused(
                            "unsafe_path",
                            f"model archive entry {_show(e.path)} meets an existing directory "
                            "or link in the destination; unpack into an empty directory",
                        ) from None
                    raise
                with os.fdopen(fd, "wb") as out, zf.open(e.info) as member:
                    while chunk := member.read(_CHUNK):
                        written += len(chunk)
                        if written > limits.max_unpacked_bytes:
                            raise _bomb(
                                f"unpacks to more than {_mib(limits.max_unpacked_bytes)} "
                                "(limit max_archive_unpacked_bytes)"
                            )
                        out.write(chunk)
    return summary


__all__ = [
    "RATIO_FLOOR_BYTES",
    "ArchiveLimits",
    "ArchiveRefused",
    "ArchiveSummary",
    "check_archive",
    "safe_extract",
]
