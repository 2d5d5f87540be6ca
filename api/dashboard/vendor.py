"""Fetch the dashboard's vendored front-end files again from npm, and refuse any that changed.

`python -m api.dashboard.vendor [VENDOR_JSON ...]` (what `make vendor` runs) reads each
vendor.json (by default the dashboard's and the browser tests'), runs `npm pack NAME@VERSION`
for each package in it, checks the tarball against the recorded npm integrity, and writes the
listed files beside the json only if every one has the recorded sha256. Nothing is written
when anything differs: a new version is a deliberate change of the json, not a side effect.

A vendor.json holds:

    {"packages": [{"package": "uplot", "version": "1.6.32", "license": "MIT",
                   "integrity": "sha512-...",
                   "files": [{"from": "package/dist/uPlot.iife.min.js",
                              "to": "uPlot.iife.min.js", "sha256": "..."}, ...],
                   "licence_files": ["uPlot.LICENSE"]}]}

`from` is the path inside the npm tarball, `to` the path relative to the json's folder;
`licence_files` name entries of `files` (by `to`) that hold the package's licence.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JSONS = (
    Path(__file__).resolve().with_name("vendor.json"),
    ROOT / "tests" / "browser" / "vendor" / "vendor.json",
)


class VendorError(Exception):
    """A package whose tarball or files are not those the json records."""


@dataclass(frozen=True)
class VendoredFile:
    source: str  # path inside the npm tarball
    target: Path  # where it lives in the repository
    sha256: str


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str
    files: tuple[VendoredFile, ...]
    licence_files: tuple[Path, ...]


def load(vendor_json: Path) -> list[Package]:
    """The packages a vendor.json records, with targets resolved beside the json."""
    data: dict[str, Any] = json.loads(vendor_json.read_text())
    base = vendor_json.parent
    packages = []
    for entry in data["packages"]:
        files = tuple(
            VendoredFile(source=f["from"], target=base / f["to"], sha256=f["sha256"])
            for f in entry["files"]
        )
        licences = tuple(base / name for name in entry["licence_files"])
        listed = {f.target for f in files}
        missing = [str(path) for path in licences if path not in listed]
        if not licences or missing:
            raise VendorError(
                f"{vendor_json}: {entry['package']} must list its licence files among its "
                f"files (not listed: {missing or 'none named'})"
            )
        packages.append(
            Package(
                name=entry["package"],
                version=entry["version"],
                integrity=entry["integrity"],
                files=files,
                licence_files=licences,
            )
        )
    return packages


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npm_integrity(data: bytes) -> str:
    """npm's `integrity` string (Subresource Integrity, sha512) of a tarball's bytes."""
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def fetch(package: Package, workdir: Path) -> dict[Path, bytes]:
    """The package's files as npm hands them out, checked against the json; writes nothing."""
    spec = f"{package.name}@{package.version}"
    packed = subprocess.run(
        ["npm", "pack", spec, "--json", "--pack-destination", str(workdir)],
        capture_output=True,
        text=True,
        cwd=workdir,
    )
    if packed.returncode != 0:
        raise VendorError(f"npm pack {spec} failed:\n{packed.stderr}")
    tarball = workdir / json.loads(packed.stdout)[0]["filename"]
    data = tarball.read_bytes()
    if npm_integrity(data) != package.integrity:
        raise VendorError(
            f"{spec}: the tarball's integrity is {npm_integrity(data)}, "
            f"vendor.json records {package.integrity}"
        )
    contents: dict[Path, bytes] = {}
    with tarfile.open(tarball, "r:gz") as archive:
        for wanted in package.files:
            member = archive.extractfile(wanted.source)
            if member is None:
                raise VendorError(f"{spec}: {wanted.source} is not a file in the tarball")
            body = member.read()
            if sha256(body) != wanted.sha256:
                raise VendorError(
                    f"{spec}: {wanted.source} has sha256 {sha256(body)}, "
                    f"vendor.json records {wanted.sha256}"
                )
            contents[wanted.target] = body
    return contents


def vendor(jsons: list[Path]) -> list[Path]:
    """Fetch every package of `jsons`; write their files only when all of them check out."""
    packages = [package for path in jsons for package in load(path)]
    contents: dict[Path, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="dlaas-vendor-") as workdir:
        for package in packages:
            contents.update(fetch(package, Path(workdir)))
    for target, body in contents.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    return list(contents)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    jsons = [Path(arg) for arg in args] or list(DEFAULT_JSONS)
    try:
        written = vendor(jsons)
    except VendorError as error:
        print(f"vendor: {error}\nnothing was written", file=sys.stderr)
        return 1
    for path in written:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"vendor: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
