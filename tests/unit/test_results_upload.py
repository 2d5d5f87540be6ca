"""RESULT_DIR to the object store: links followed only inside it, every file opened through no
link, so a result swapped for a link to one of the uploader's own files is never stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner_image.results_upload import results_prefix, upload_one, upload_results
from storage.object_store import LocalObjectStore


def test_results_keep_their_paths_and_links_inside_are_followed(tmp_path: Path) -> None:
    results = tmp_path / "results"
    (results / "sub").mkdir(parents=True)
    (results / "sub" / "model.bin").write_bytes(b"weights")
    (results / "alias.bin").symlink_to(results / "sub" / "model.bin")
    secret = tmp_path / "helper-only"
    secret.write_text("DLAAS_JOB_TOKEN=x")
    (results / "leak.txt").symlink_to(secret)
    store = LocalObjectStore(tmp_path / "objects")
    assert upload_results(store, results, "jobs/j/results/") == 2
    assert store.get_bytes("jobs/j/results/sub/model.bin") == b"weights"
    assert store.get_bytes("jobs/j/results/alias.bin") == b"weights"
    assert not store.exists("jobs/j/results/leak.txt")


def test_a_result_swapped_for_a_link_after_the_listing_is_refused(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    secret = tmp_path / "helper-only"
    secret.write_text("DLAAS_JOB_TOKEN=x")
    (results / "model.bin").symlink_to(secret)  # listed as a file, then swapped
    store = LocalObjectStore(tmp_path / "objects")
    with pytest.raises(OSError):
        upload_one(store, results, "model.bin", "jobs/j/results/model.bin")
    assert not store.exists("jobs/j/results/model.bin")
    linked_dir = tmp_path / "linked"
    linked_dir.symlink_to(tmp_path)  # RESULT_DIR itself swapped for a link
    with pytest.raises(OSError):
        upload_one(store, linked_dir, "helper-only", "jobs/j/results/x")


def test_a_learners_results_get_one_folder_of_its_name() -> None:
    base = "jobs/j/results/"
    assert results_prefix("j", 1, ["model.pt"]) == base
    assert results_prefix("j", 2, ["model.pt"]) == base + "learner-2/"
    assert results_prefix("j", 2, []) == base + "learner-2/"
    # the program made the folder itself: not learner-2/learner-2/
    assert results_prefix("j", 2, ["learner-2/model.pt", "learner-2/m/x"]) == base
    # some of its results outside it, or another learner's folder: one of its own
    assert results_prefix("j", 2, ["learner-2/model.pt", "top.txt"]) == base + "learner-2/"
    assert results_prefix("j", 2, ["learner-3/model.pt"]) == base + "learner-2/"
    assert results_prefix("j", 2, ["learner-20/model.pt"]) == base + "learner-2/"
