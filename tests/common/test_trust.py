"""Whose word a file is: StrictModes for what rlwatch executes, protected_symlinks for what it reads.

The files are made by this test, as root, and given to ``nobody`` with chown: ownership is what the rules read, so
that is the attack as the kernel sees it without a second user logging in.
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from rlwatch.common.trust import LinkRefused, config_distrust, distrust, open_followed, open_read

try:
    NOBODY = pwd.getpwnam("nobody").pw_uid
except KeyError:  # pragma: no cover - every Debian has it
    NOBODY = None

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or NOBODY is None, reason="needs root to give files to nobody")


def _dir(path: Path, mode: int) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, mode)
    return path


def _file(path: Path, mode: int = 0o644, owner: int | None = None, text: str = "profile: generic\n") -> Path:
    path.write_text(text)
    os.chmod(path, mode)
    if owner is not None:
        os.chown(path, owner, -1)
    return path


def test_own_file_in_private_dirs_is_trusted(tmp_path: Path) -> None:
    run = _dir(tmp_path / "run", 0o755)
    assert distrust(_file(run / "rlwatch.yaml"), up_to=run) is None


def test_another_users_file_is_not(tmp_path: Path) -> None:
    run = _dir(tmp_path / "run", 0o755)
    f = _file(run / "rlwatch.yaml", owner=NOBODY)
    assert distrust(f, up_to=run) == f"{f} is owned by uid {NOBODY}, not by this user (uid 0) or root"


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_file_others_can_write_is_not(tmp_path: Path, mode: int) -> None:
    run = _dir(tmp_path / "run", 0o755)
    f = _file(run / "rlwatch.yaml", mode)
    assert distrust(f, up_to=run) == f"{f} is writable by group or others (mode {mode:04o})"


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_file_under_a_directory_others_can_write_is_not(tmp_path: Path, mode: int) -> None:
    run = _dir(tmp_path / "run", mode)
    f = _file(run / "rlwatch.yaml")
    why = config_distrust(f, run)
    assert why is not None and why.startswith(f"the configuration {f} is not trusted: {run} is writable by group")
    assert why.endswith("actions are off (monitoring goes on)")


def test_deeper_directories_up_to_the_run_directory_are_checked(tmp_path: Path) -> None:
    run = _dir(tmp_path / "run", 0o755)
    conf = _dir(run / "conf", 0o777)
    f = _file(conf / "rlwatch.yaml")
    assert distrust(f, up_to=run) is not None and str(conf) in str(distrust(f, up_to=run))
    os.chmod(conf, 0o755)
    assert distrust(f, up_to=run) is None
    os.chown(conf, NOBODY, -1)  # a directory of another user's: they may rename the file away and put theirs in
    assert f"{conf} is owned by uid {NOBODY}" in str(distrust(f, up_to=run))


def test_a_sticky_directory_protects_an_entry_of_ours_but_not_one_of_theirs(tmp_path: Path) -> None:
    run = _dir(tmp_path / "run", 0o1777)  # like /tmp: only an entry's owner may rename or remove it
    mine = _file(run / "rlwatch.yaml")
    assert distrust(mine, up_to=run) is None
    os.chown(mine, NOBODY, -1)
    assert distrust(mine, up_to=run) is not None


def test_a_file_outside_the_run_directory_is_checked_up_to_the_root(tmp_path: Path) -> None:
    open_dir = _dir(tmp_path / "shared", 0o777)
    f = _file(open_dir / "rlwatch.yaml")
    why = distrust(f, up_to=tmp_path / "elsewhere")
    assert why is not None and str(open_dir) in why


def test_a_link_is_judged_by_its_owner_and_by_the_file_it_names(tmp_path: Path) -> None:
    run = _dir(tmp_path / "run", 0o755)
    target = _file(_dir(tmp_path / "private", 0o700) / "real.yaml")
    link = run / "rlwatch.yaml"
    link.symlink_to(target)
    assert distrust(link, up_to=run) is None
    os.lchown(link, NOBODY, -1)
    assert "(a symbolic link)" in str(distrust(link, up_to=run))
    os.lchown(link, 0, -1)
    os.chmod(target, 0o666)
    assert f"{target} is writable by group or others" in str(distrust(link, up_to=run))


# ---------------------------------------------------------------------------------------------- links to read


def _secret(tmp_path: Path) -> Path:
    private = _dir(tmp_path / "root-only", 0o700)
    return _file(private / "id_rsa", 0o600, text="TOP-SECRET-KEY-MATERIAL\n")


def test_a_link_others_planted_where_others_can_write_is_not_followed(tmp_path: Path) -> None:
    shared = _dir(tmp_path / "shared", 0o1777)
    link = shared / "train.log"
    link.symlink_to(_secret(tmp_path))
    os.lchown(link, NOBODY, -1)
    with pytest.raises(LinkRefused) as refused:
        open_followed(link)
    assert f"{link} is a symbolic link of uid {NOBODY} in {shared}, which others can write" in refused.value.strerror
    with pytest.raises(LinkRefused):
        open_read(link)


def test_links_the_rule_allows_are_followed(tmp_path: Path) -> None:
    secret = _secret(tmp_path)
    shared = _dir(tmp_path / "shared", 0o1777)
    mine = shared / "mine.log"
    mine.symlink_to(secret)  # our own link: whoever made it could read the target anyway
    with open_read(mine) as fh:
        assert fh.read() == b"TOP-SECRET-KEY-MATERIAL\n"
    theirs = _file(shared / "theirs.txt", owner=NOBODY, text="their own\n")
    link = shared / "their.log"
    link.symlink_to(theirs)
    os.lchown(link, NOBODY, -1)  # their link to their own file
    with open_read(link) as fh:
        assert fh.read() == b"their own\n"
    private = _dir(tmp_path / "private", 0o755)
    other = private / "x.log"
    other.symlink_to(secret)
    os.lchown(other, NOBODY, -1)  # a directory nobody else can write: only its owner put the link there
    with open_read(other) as fh:
        assert fh.read() == b"TOP-SECRET-KEY-MATERIAL\n"


def test_a_link_in_a_directory_on_the_way_is_judged_too(tmp_path: Path) -> None:
    shared = _dir(tmp_path / "shared", 0o777)
    logs = shared / "logs"
    logs.symlink_to(_secret(tmp_path).parent)
    os.lchown(logs, NOBODY, -1)
    with pytest.raises(LinkRefused):
        open_followed(logs / "id_rsa")


def test_open_read_takes_only_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        open_read(fifo)  # would block for ever as a plain open
