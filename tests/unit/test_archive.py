"""Model-archive checks: every refusal, forged headers, and safe extraction."""

from __future__ import annotations

import io
import os
import stat
import struct
import warnings
import zipfile
import zlib
from pathlib import Path

import pytest

from api.archive import check_model_archive
from api.errors import Invalid, TooLarge
from storage.archive_safety import (
    ArchiveLimits,
    ArchiveRefused,
    ArchiveSummary,
    check_archive,
    safe_extract,
)
from storage.settings import Settings

LIMITS = ArchiveLimits()
SMALL = ArchiveLimits(
    max_bytes=1024 * 1024,
    max_files=5,
    max_unpacked_bytes=4 * 1024 * 1024,
    max_compression_ratio=200.0,
)


def make_zip(
    entries: list[tuple[str | zipfile.ZipInfo, bytes]],
    compression: int = zipfile.ZIP_DEFLATED,
) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are written on purpose
        with zipfile.ZipFile(buf, "w", compression) as zf:
            for name, data in entries:
                zf.writestr(name, data)
    return buf.getvalue()


def unix_info(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = mode << 16
    return info


def cd_offsets(data: bytes) -> list[int]:
    """Offsets of each central directory header, in order."""
    eocd = data.rfind(b"PK\x05\x06")
    count, _size, start = struct.unpack_from("<HLL", data, eocd + 10)
    out = []
    at = start
    for _ in range(count):
        assert data[at : at + 4] == b"PK\x01\x02"
        out.append(at)
        n, m, k = struct.unpack_from("<HHH", data, at + 28)
        at += 46 + n + m + k
    return out


def local_offset(data: bytes, index: int) -> int:
    return int(struct.unpack_from("<L", data, cd_offsets(data)[index] + 42)[0])


def patch(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def refusal(data: bytes, limits: ArchiveLimits = LIMITS) -> ArchiveRefused:
    with pytest.raises(ArchiveRefused) as info:
        check_archive(io.BytesIO(data), limits)
    return info.value


def api_refusal(data: bytes, limits: ArchiveLimits = LIMITS) -> Invalid | TooLarge:
    with pytest.raises((Invalid, TooLarge)) as info:
        check_model_archive(io.BytesIO(data), limits)
    err = info.value
    assert isinstance(err, Invalid | TooLarge)
    assert err.field == "model"
    assert err.to_body()["field"] == "model"
    return err


GOOD = make_zip(
    [
        ("train.py", b"import sdk\nprint('hello')\n" * 50),
        ("pkg/", b""),
        ("pkg/__init__.py", b""),
        ("pkg/model.py", b"class Net: pass\n" * 100),
        ("setup.sh", b"#!/bin/sh\necho ok\n"),
    ]
)


# --- accepted -----------------------------------------------------------------------------


def test_good_archive_summary_and_position_kept() -> None:
    fh = io.BytesIO(GOOD)
    fh.seek(7)
    summary = check_model_archive(fh, LIMITS)
    assert summary == ArchiveSummary(files=4, unpacked_bytes=summary.unpacked_bytes)
    assert summary.unpacked_bytes == 50 * 26 + 100 * 16 + 18
    assert fh.tell() == 7


def test_good_archive_from_path(tmp_path: Path) -> None:
    path = tmp_path / "model.zip"
    path.write_bytes(GOOD)
    assert check_archive(path, LIMITS).files == 4
    assert check_archive(str(path), LIMITS).files == 4


@pytest.mark.parametrize(
    "method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]
)
def test_every_common_compression_method_accepted(method: int) -> None:
    data = make_zip([("a.txt", b"abc" * 1000), ("b/c.txt", os.urandom(3000))], method)
    assert check_archive(io.BytesIO(data), LIMITS) == ArchiveSummary(2, 6000)


def test_small_highly_compressible_file_is_not_a_bomb() -> None:
    # 512 KiB of zeros compresses ~1000:1 but is below the ratio floor
    data = make_zip([("zeros.bin", bytes(512 * 1024))])
    assert check_archive(io.BytesIO(data), LIMITS).unpacked_bytes == 512 * 1024


def test_dot_slash_names_and_root_entry_accepted() -> None:
    data = make_zip([("./", b""), ("./a.py", b"x"), ("b//c.py", b"y")])
    assert check_archive(io.BytesIO(data), LIMITS).files == 2


def test_empty_zip_accepted() -> None:
    assert check_archive(io.BytesIO(make_zip([])), LIMITS) == ArchiveSummary(0, 0)


def test_limits_from_settings() -> None:
    s = Settings(
        max_archive_bytes=1,
        max_archive_files=2,
        max_archive_unpacked_bytes=3,
        max_compression_ratio=4.5,
    )
    assert ArchiveLimits.from_settings(s) == ArchiveLimits(1, 2, 3, 4.5)


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"hello, not a zip", GOOD[: len(GOOD) // 2]])
def test_not_a_zip(data: bytes) -> None:
    err = api_refusal(data)
    assert (err.status, err.code) == (422, "invalid_archive")
    assert "zip" in err.detail and "zip -r" in err.detail


def test_too_large_is_413() -> None:
    err = api_refusal(GOOD, ArchiveLimits(max_bytes=100))
    assert isinstance(err, TooLarge)
    assert (err.status, err.code) == (413, "archive_too_large")
    assert "training data" in err.detail


def test_too_many_files() -> None:
    data = make_zip([(f"f{i}.py", b"x") for i in range(6)])
    err = api_refusal(data, SMALL)
    assert (err.status, err.code) == (422, "too_many_files")
    assert "5-file limit" in err.detail and "leave data sets" in err.detail


def test_too_many_files_with_a_forged_entry_count() -> None:
    data = make_zip([(f"f{i}.py", b"x") for i in range(6)])
    eocd = data.rfind(b"PK\x05\x06")
    data = patch(data, eocd + 8, "<H", 1)
    data = patch(data, eocd + 10, "<H", 1)
    assert refusal(data, SMALL).code == "too_many_files"


@pytest.mark.parametrize(
    "name",
    ["../../etc/passwd", "a/../../b.py", "ok/..", "../x/"],
)
def test_zip_slip(name: str, tmp_path: Path) -> None:
    data = make_zip([("train.py", b"x"), (name, b"owned")])
    err = api_refusal(data)
    assert err.code == "unsafe_path"
    assert "zip-slip" in err.detail and "zip -r" in err.detail
    with pytest.raises(ArchiveRefused):
        safe_extract(io.BytesIO(data), tmp_path / "out", LIMITS)
    assert not (tmp_path / "etc").exists()
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("name", ["/etc/passwd", "C:/Windows/x.dll", "c:evil.py", "//srv/x"])
def test_absolute_paths(name: str) -> None:
    err = api_refusal(make_zip([(name, b"x")]))
    assert err.code == "unsafe_path"
    assert "absolute" in err.detail and "relative" in err.detail


@pytest.mark.parametrize("name", ["..\\..\\evil.py", "dir\\file.py"])
def test_backslashes(name: str) -> None:
    err = api_refusal(make_zip([(name, b"x")]))
    assert err.code == "unsafe_path"
    assert "backslash" in err.detail and "/ separators" in err.detail


def test_control_characters_and_nul_in_names() -> None:
    data = make_zip([("evil\nname.py", b"x")])
    assert refusal(data).code == "unsafe_path"
    data = make_zip([("safe.pyXX/../../x", b"x")])
    data = data.replace(b"safe.pyXX", b"safe.py\x00X")
    err = refusal(data)
    assert err.code == "unsafe_path" and "control characters" in err.detail


def test_symlink_entry() -> None:
    data = make_zip([("train.py", b"x"), (unix_info("link", stat.S_IFLNK | 0o777), b"/etc")])
    err = api_refusal(data)
    assert err.code == "link_in_archive"
    assert "symbolic link" in err.detail and "replace links" in err.detail


@pytest.mark.parametrize("kind", [stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK])
def test_special_files(kind: int) -> None:
    err = refusal(make_zip([(unix_info("dev", kind | 0o644), b"")]))
    assert err.code == "link_in_archive" and "special file" in err.detail


def test_regular_unix_modes_accepted() -> None:
    data = make_zip(
        [(unix_info("run.sh", stat.S_IFREG | 0o755), b"x"), (unix_info("d/", stat.S_IFDIR), b"")]
    )
    assert check_archive(io.BytesIO(data), LIMITS).files == 1


@pytest.mark.parametrize("flag", [0x1, 0x41])
def test_encrypted_entry(flag: int) -> None:
    data = make_zip([("a.py", b"x"), ("secret.py", b"y")])
    data = patch(data, cd_offsets(data)[1] + 8, "<H", flag)
    data = patch(data, local_offset(data, 1) + 6, "<H", flag)
    err = api_refusal(data)
    assert err.code == "encrypted_entry"
    assert "'secret.py'" in err.detail and "without a password" in err.detail


def test_unsupported_compression_method() -> None:
    data = make_zip([("a.py", b"x")])
    data = patch(data, cd_offsets(data)[0] + 10, "<H", 99)
    err = refusal(data)
    assert err.code == "invalid_archive" and "deflate" in err.detail


@pytest.mark.parametrize(
    "names",
    [
        ["a.py", "a.py"],
        ["a.py", "./a.py"],
        ["pkg/a.py", "pkg//a.py"],
        ["a", "a/b.py"],
        ["a/b.py", "a"],
        ["d/", "d"],
        ["d", "d/"],
    ],
)
def test_duplicate_and_colliding_names(names: list[str]) -> None:
    err = api_refusal(make_zip([(n, b"x") for n in names]))
    assert err.code == "duplicate_entry"
    assert "more than one entry" in err.detail and "keep one" in err.detail


def test_repeated_directory_entries_are_fine() -> None:
    assert check_archive(io.BytesIO(make_zip([("d/", b""), ("d/", b"")])), LIMITS).files == 0


def test_zip_bomb_100mb_of_zeros() -> None:
    buf = io.BytesIO()
    with (
        zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("zeros.bin", "w", force_zip64=True) as member,
    ):
        block = bytes(1024 * 1024)
        for _ in range(100):
            member.write(block)
    data = buf.getvalue()
    assert len(data) < 200 * 1024
    err = api_refusal(data)
    assert err.code == "zip_bomb"
    assert "compresses" in err.detail and "200:1" in err.detail and "training data" in err.detail


def test_declared_unpacked_total_over_limit() -> None:
    data = make_zip([(f"r{i}.bin", os.urandom(1024 * 1024)) for i in range(5)])
    err = refusal(data, ArchiveLimits(max_unpacked_bytes=3 * 1024 * 1024))
    assert err.code == "zip_bomb" and "max_archive_unpacked_bytes" in err.detail


def test_whole_archive_ratio() -> None:
    # many entries, each below the per-entry floor, together far above the ratio
    data = make_zip([(f"z{i}.bin", bytes(1000 * 1024)) for i in range(4)])
    err = refusal(data, ArchiveLimits(max_compression_ratio=50))
    assert err.code == "zip_bomb" and "times its own size" in err.detail


def forged_bomb(real: bytes, declared: int) -> bytes:
    """An entry whose headers declare `declared` bytes but which inflates to `real`."""
    data = make_zip([("small.txt", b"hello"), ("bomb.bin", real)])
    cd = cd_offsets(data)[1]
    lo = local_offset(data, 1)
    crc = zlib.crc32(real[:declared])
    for at, fmt, value in [
        (cd + 24, "<L", declared),
        (lo + 22, "<L", declared),
        (cd + 16, "<L", crc),
        (lo + 14, "<L", crc),
    ]:
        data = patch(data, at, fmt, value)
    return data


def test_forged_header_bomb_caught_by_streaming(tmp_path: Path) -> None:
    data = forged_bomb(bytes(20 * 1024 * 1024), declared=1000)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert zf.getinfo("bomb.bin").file_size == 1000  # declared sizes look harmless
    err = api_refusal(data)
    assert err.code == "zip_bomb"
    assert "'bomb.bin'" in err.detail and "forged header" in err.detail
    with pytest.raises(ArchiveRefused):
        safe_extract(io.BytesIO(data), tmp_path / "out", LIMITS)
    assert not (tmp_path / "out" / "bomb.bin").exists()


def test_forged_header_stopped_by_unpacked_budget() -> None:
    # declares 3 MiB (under the ratio floor's reach), really inflates to 40 MiB
    data = forged_bomb(bytes(40 * 1024 * 1024), declared=3 * 1024 * 1024)
    err = refusal(data, ArchiveLimits(max_unpacked_bytes=2 * 1024 * 1024 + 100))
    assert err.code == "zip_bomb"


def test_declared_larger_than_real_is_corrupt() -> None:
    data = make_zip([("a.txt", b"abc" * 100)])
    data = patch(data, cd_offsets(data)[0] + 24, "<L", 10_000)
    err = refusal(data)
    assert err.code == "invalid_archive" and "corrupt" in err.detail


def test_crc_mismatch_is_corrupt() -> None:
    data = make_zip([("a.txt", b"abc" * 100)])
    data = patch(data, cd_offsets(data)[0] + 16, "<L", 12345)
    err = refusal(data)
    assert err.code == "invalid_archive" and "CRC" in err.detail


def test_overlapping_entries() -> None:
    data = make_zip([("a.txt", b"a" * 5000), ("b.txt", b"b" * 5000)])
    data = patch(data, cd_offsets(data)[1] + 42, "<L", 0)
    err = refusal(data)
    assert err.code == "zip_bomb" and "overlaps" in err.detail


def test_local_header_name_differs_from_directory() -> None:
    data = make_zip([("good.py", b"x")])
    lo = local_offset(data, 0)
    data = data[: lo + 30] + b"evil.py" + data[lo + 37 :]
    err = refusal(data)
    assert err.code == "unsafe_path" and "local header" in err.detail


def test_every_refusal_names_model_and_a_fix() -> None:
    cases = [
        b"junk",
        make_zip([("../x", b"")]),
        make_zip([("/x", b"")]),
        make_zip([(unix_info("l", stat.S_IFLNK | 0o777), b"x")]),
        make_zip([("a", b""), ("a", b"")]),
        forged_bomb(bytes(1024 * 1024), declared=10),
    ]
    for data in cases:
        err = api_refusal(data)
        assert err.detail.startswith("model archive"), err.detail
        assert any(w in err.detail for w in ("re-create", "replace", "keep one", "Leave")), (
            err.detail
        )


# --- safe_extract -------------------------------------------------------------------------


def test_safe_extract_writes_files_and_keeps_exec_bit(tmp_path: Path) -> None:
    data = make_zip(
        [
            (unix_info("run.sh", stat.S_IFREG | 0o4755), b"#!/bin/sh\n"),
            ("pkg/", b""),
            ("pkg/m.py", b"x = 1\n"),
            ("./top.py", b"y"),
        ]
    )
    src = tmp_path / "m.zip"
    src.write_bytes(data)
    dest = tmp_path / "out"
    summary = safe_extract(src, dest, LIMITS)
    assert summary == ArchiveSummary(files=3, unpacked_bytes=17)
    assert (dest / "pkg" / "m.py").read_bytes() == b"x = 1\n"
    assert (dest / "top.py").read_bytes() == b"y"
    mode = (dest / "run.sh").stat().st_mode
    assert mode & 0o100 and not mode & stat.S_ISUID


def test_safe_extract_refuses_links_in_destination(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "pkg").symlink_to(outside)
    (dest / "f.py").symlink_to(outside / "f.py")
    with pytest.raises(ArchiveRefused) as info:
        safe_extract(io.BytesIO(make_zip([("pkg/m.py", b"x")])), dest, LIMITS)
    assert info.value.code == "unsafe_path"
    with pytest.raises(ArchiveRefused):
        safe_extract(io.BytesIO(make_zip([("f.py", b"x")])), dest, LIMITS)
    assert list(outside.iterdir()) == []


def test_safe_extract_rechecks_everything(tmp_path: Path) -> None:
    data = make_zip([("ok.py", b"x"), (unix_info("l", stat.S_IFLNK | 0o777), b"/etc/passwd")])
    with pytest.raises(ArchiveRefused) as info:
        safe_extract(io.BytesIO(data), tmp_path / "out", LIMITS)
    assert info.value.code == "link_in_archive"
    assert not (tmp_path / "out" / "ok.py").exists()
