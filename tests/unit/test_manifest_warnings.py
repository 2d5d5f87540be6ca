"""Top-level manifest keys neither FfDL nor dlaas reads: kept, and named in a warning; one a
typo away from a field is refused with the field it meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.errors import Invalid
from api.manifest import parse_manifest, unknown_field_warnings

SAMPLES = sorted((Path(__file__).parents[2] / "examples" / "ffdl_manifests").glob("*.yml"))
MINIMAL = "framework:\n  command: python train.py\n"


def warnings_of(text: str) -> list[str]:
    return unknown_field_warnings(parse_manifest(text).normalized())


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("restart_polcy:\n  max_restarts: 2\n", "restart_policy"), ("lerners: 4\n", "learners")],
)
def test_a_misspelt_field_is_refused_with_the_field_it_most_likely_meant(
    typo: str, meant: str
) -> None:
    with pytest.raises(Invalid) as refused:
        parse_manifest(MINIMAL + typo)
    key = typo.split(":")[0]
    assert refused.value.field == key
    assert f"{key} is not a manifest field: did you mean {meant}?" in str(refused.value)


def test_a_key_like_no_field_is_named_as_kept_but_unread() -> None:
    assert warnings_of(MINIMAL + "owner_email: a@b.c\n") == [
        "owner_email is not a manifest field: it is kept, but nothing reads it"
    ]


def test_the_unread_key_is_kept_and_the_job_still_accepted() -> None:
    manifest = parse_manifest(MINIMAL + "owner_email: a@b.c\n")
    assert manifest.normalized()["owner_email"] == "a@b.c"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_ffdl_example_manifests_warn_of_nothing(sample: Path) -> None:
    assert warnings_of(sample.read_text()) == []


def test_ffdl_fields_dlaas_does_not_read_warn_of_nothing() -> None:
    assert warnings_of(MINIMAL + "gpu_type: nvidia-TeslaK80\n") == []


def test_only_top_level_keys_are_checked() -> None:
    """Below the top, FfDL's blocks are lenient and dlaas's refuse unknown keys."""
    text = MINIMAL.replace("framework:\n", "framework:\n  image_tag: x\n")
    assert warnings_of(text) == []
