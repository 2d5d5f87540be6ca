"""The vendored front-end files are byte for byte what their vendor.json records, each package
with its licence beside it (`make vendor` fetches them again from npm and checks the same)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest

from api.dashboard import vendor

JSONS = list(vendor.DEFAULT_JSONS)
PACKAGES = [(path, package) for path in JSONS for package in vendor.load(path)]


def _id(case: tuple[Path, vendor.Package]) -> str:
    return f"{case[1].name}@{case[1].version}"


def test_the_dashboard_and_the_browser_tests_each_record_their_packages() -> None:
    names = {path.parent.name: [p.name for p in vendor.load(path)] for path in JSONS}
    assert names == {"dashboard": ["uplot", "fflate"], "vendor": ["axe-core"]}


@pytest.mark.parametrize("case", PACKAGES, ids=[_id(case) for case in PACKAGES])
def test_every_vendored_file_has_its_recorded_sha256(case: tuple[Path, vendor.Package]) -> None:
    _, package = case
    for file in package.files:
        assert file.target.is_file(), f"{file.target} is missing: run `make vendor`"
        digest = hashlib.sha256(file.target.read_bytes()).hexdigest()
        assert digest == file.sha256, f"{file.target} differs from {package.name}'s vendor.json"


@pytest.mark.parametrize("case", PACKAGES, ids=[_id(case) for case in PACKAGES])
def test_every_package_has_its_licence_beside_it(case: tuple[Path, vendor.Package]) -> None:
    _, package = case
    assert package.licence_files
    for licence in package.licence_files:
        assert licence.is_file() and licence.stat().st_size > 0, f"{licence} is missing"


@pytest.mark.parametrize("case", PACKAGES, ids=[_id(case) for case in PACKAGES])
def test_every_package_is_pinned_to_one_version_and_tarball(
    case: tuple[Path, vendor.Package],
) -> None:
    path, package = case
    raw = next(p for p in json.loads(path.read_text())["packages"] if p["package"] == package.name)
    assert all(part.isdigit() for part in package.version.split(".")), package.version
    assert raw["license"], f"{package.name} names no licence"
    algorithm, _, digest = package.integrity.partition("-")
    assert algorithm == "sha512" and len(base64.b64decode(digest)) == 64


def test_a_tarball_integrity_is_npms_sha512_string() -> None:
    assert vendor.npm_integrity(b"") == (
        "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
    )


def test_a_json_whose_licence_is_not_among_its_files_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "vendor.json"
    entry = {
        "package": "x",
        "version": "1.0.0",
        "license": "MIT",
        "integrity": "sha512-",
        "files": [{"from": "package/x.js", "to": "x.js", "sha256": "0" * 64}],
        "licence_files": ["x.LICENSE"],
    }
    path.write_text(json.dumps({"packages": [entry]}))
    with pytest.raises(vendor.VendorError, match="licence"):
        vendor.load(path)
