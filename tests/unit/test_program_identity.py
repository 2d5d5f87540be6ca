"""A program with a uid of its own: what the runner reads of its files, and when the agent
gives it one."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from learner_image import program_sandbox
from learner_image.checkpoint_sync import open_inside
from learner_image.job_network import loopback_hosts
from learner_image.program_identity import hand_over, remove_files_of
from learner_image.program_sandbox import kept_paths, revealed
from lifecycle_manager.backends.local import node_agent


def test_a_file_is_read_through_no_link_at_any_step(tmp_path: Path) -> None:
    root = tmp_path / "ckpt"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "state.pt").write_bytes(b"weights")
    secret = tmp_path / "secret"
    secret.write_text("root's")
    with open_inside(root, "sub/state.pt") as stream:
        assert stream.read() == b"weights"
    (root / "leaf").symlink_to(secret)
    (root / "hop").symlink_to(tmp_path)
    for rel in ("leaf", "hop/secret", "../secret", "sub/../leaf", "sub", "missing"):
        with pytest.raises(OSError):
            open_inside(root, rel)


def test_hand_over_gives_the_program_its_files_and_not_what_links_point_at(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    program = tmp_path / "model"
    program.mkdir()
    (program / "train.py").write_text("print()")
    outside = tmp_path / "outside"
    outside.write_text("root's")
    (program / "link").symlink_to(outside)
    hand_over([program, tmp_path / "results"], 900_123)
    assert program.stat().st_uid == 900_123 and (program / "train.py").stat().st_uid == 900_123
    assert (program / "link").lstat().st_uid == 900_123
    assert outside.stat().st_uid == 0  # the link's target stays root's
    assert (tmp_path / "results").is_dir() and oct(program.stat().st_mode & 0o777) == "0o700"


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's own are closed to others when root)."""
    path = Path(tempfile.mkdtemp())
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_programs_get_uids_of_their_own_only_where_they_can_run(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert node_agent.isolation("off").isolating is False
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    refused = node_agent.isolation("on")
    assert not refused.isolating and "root" in refused.why
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    private = open_dir / "home"
    installation = private / "python"
    (installation / "bin").mkdir(parents=True)
    interpreter = installation / "bin" / "python"
    interpreter.write_text("")
    interpreter.chmod(0o755)
    private.chmod(0o700)
    monkeypatch.setattr(sys, "executable", str(interpreter))
    monkeypatch.setattr(program_sandbox, "TEMPORARY_DIRS", ())  # open_dir is in /tmp
    for prefix in ("prefix", "base_prefix", "exec_prefix", "base_exec_prefix"):
        monkeypatch.setattr(sys, prefix, str(installation))
    monkeypatch.setattr(program_sandbox, "probe", lambda reveal=(): "no namespaces here")
    shut = node_agent.isolation("auto")
    assert not shut.isolating and str(interpreter) in shut.why and "run as root" in shut.why
    assert "no namespaces here" in shut.why
    assert node_agent.isolation("on").isolating  # told to: the jobs bring their own Python
    shown: list[object] = []
    monkeypatch.setattr(program_sandbox, "probe", lambda reveal=(): shown.append(reveal))
    behind = node_agent.isolation("auto")
    assert behind.isolating and behind.private_mounts and str(private) in behind.why
    assert shown == [((private, installation),)]
    installation.chmod(0o700)  # the installation itself closed: no namespace can open it
    monkeypatch.setattr(program_sandbox, "probe", lambda reveal=(): None)
    assert not node_agent.isolation("auto").isolating
    installation.chmod(0o755)
    private.chmod(0o755)
    opened = node_agent.isolation("auto")
    assert opened.isolating and "shown" not in opened.why


def test_a_closed_directory_is_revealed_only_where_a_namespace_can_open_it(
    open_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program_sandbox, "TEMPORARY_DIRS", ())  # open_dir is in /tmp
    closed = open_dir / "root"
    (closed / "pyenv" / "3.11").mkdir(parents=True)
    (open_dir / "srv").mkdir()
    closed.chmod(0o700)
    inner = closed / "pyenv" / "3.11"
    assert revealed([inner, inner / "lib", open_dir / "srv"]) == ((closed, inner),)
    assert revealed([closed]) is None  # itself closed
    assert revealed([Path("/tmp")]) == ()
    monkeypatch.undo()
    # a closed directory in /tmp: the program's own /tmp would cover what is bound back
    assert revealed([inner]) is None


def test_only_paths_a_private_namespace_would_hide_are_bound_back() -> None:
    learner = Path("/tmp/dlaas-learners-x/jobs/j/learner-1/a0/program")
    kept = kept_paths(
        [learner / "model", learner / "tmp", learner, Path("/dev/shm/dlaas-ps-j-1-a0/region")]
    )
    assert kept == (Path("/dev/shm/dlaas-ps-j-1-a0/region"), learner)
    assert kept_paths([Path("/srv/dlaas/jobs/j/program"), Path("/tmpfoo")]) == ()


def test_what_a_uid_left_where_it_could_reach_is_removed_and_nothing_else(
    open_dir: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing owners needs root")
    uid = 900_000 + os.getpid() % 50_000
    left = open_dir / "left"
    left.write_text("secret")
    own_dir = open_dir / "own"
    (own_dir / "inner").mkdir(parents=True)
    (own_dir / "inner" / "roots").write_text("root's, in the uid's directory")
    closed = open_dir / "closed"
    closed.mkdir(mode=0o700)
    (closed / "unreachable").write_text("")
    someone = open_dir / "someone-elses"
    someone.write_text("")
    for path in (left, own_dir, closed / "unreachable"):
        os.chown(path, uid, uid)
    os.chown(someone, uid + 1, uid + 1)
    (open_dir / "link").symlink_to(closed)
    learners = open_dir / "learners"  # the node's working directories: not searched
    (learners / "program").mkdir(parents=True)
    os.chown(learners / "program", uid, uid)
    removed = remove_files_of(uid, [open_dir], skip=[learners])
    assert sorted(removed) == sorted([str(left), str(own_dir)])
    assert (learners / "program").exists()
    assert someone.exists() and (closed / "unreachable").exists()  # out of the uid's reach


def test_the_jobs_own_network_names_its_loopback_addresses_the_nodes_hosts_file_omits() -> None:
    node = "# the node's\n127.0.0.1 localhost\n::1 localhost ip6-localhost\n10.0.0.5 vm"
    shown = loopback_hosts(node)
    assert shown.startswith(node + "\n") and shown.endswith("::ffff:127.0.0.1 localhost\n")
    assert shown.count("::1 ") == 1
    assert loopback_hosts(shown) == shown
    assert loopback_hosts("") == "::1 localhost\n::ffff:127.0.0.1 localhost\n"
