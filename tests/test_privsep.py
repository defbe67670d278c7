"""Root works on another user's run as that user (issue: privilege separation, not one more check per path).

Root runs the real command on a run directory that the second user, ``nobody``, owns; the tests read what the kernel
says of the processes involved (their uids, their files) rather than what rlwatch says of itself:

- the watching process works as ``nobody`` (uid, gid and groups), so every file of the run is read, and its
  ``.rlwatch/`` written, with that user's rights: a root-only file the directory names or links is refused by the
  kernel, a run directory swapped for a link to root's run afterwards gains nothing;
- root's helper answers its fixed requests and nothing else, and ends with the watcher;
- where that user cannot read rlwatch's installation, the command stops with one line instead of watching as root;
- a run only root controls is watched as before, by root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.discover.privsep import controller
from tests.simhost import wait_until
from tests.unprivileged import CAN_DROP_PRIVILEGES, NOBODY, PYTHON, Runtime, separation_problem, shared_dir

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CAN_DROP_PRIVILEGES, reason="needs root, setpriv and a second user (nobody)"),
]

SECRET = "ROOT_ONLY_SECRET_CONTENT_7f3a"


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory under /tmp (0755): pytest's own temporary tree is private to root, and nobody could not enter it."""
    d = shared_dir("rlwatch-privsep-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _theirs(base: Path, name: str = "run") -> Path:
    assert NOBODY is not None
    run = base / name
    run.mkdir()
    (run / "train.log").write_text("step:1 - loss:1.0\nstep:2 - loss:0.9\n")
    for path in (run, run / "train.log"):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    return run


def _root_only(base: Path) -> Path:
    private = base / "rootonly"
    private.mkdir(mode=0o700)
    secret = private / "secret.txt"
    secret.write_text(f'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: {SECRET}\n')
    secret.chmod(0o600)
    return secret


def _helper_pid(stderr: str) -> int:
    found = re.search(r"root's process \(pid (\d+)\)", stderr)
    assert found, stderr
    return int(found.group(1))


def test_who_controls_a_directory(base: Path) -> None:
    assert NOBODY is not None
    assert controller(base) is None  # root's, under root's /tmp: root's own run
    run = _theirs(base)
    owner = controller(run)
    assert owner is not None and owner.uid == NOBODY.pw_uid and owner.because == run
    # Root's directory inside theirs: they can rename it away and put another in its place.
    inner = run / "inner"
    inner.mkdir()
    os.chown(inner, 0, 0)
    owner = controller(inner)
    assert owner is not None and owner.uid == NOBODY.pw_uid and owner.because == run


def test_report_on_another_users_run_reads_as_that_user(separated: Runtime, base: Path) -> None:
    """N2, N7 and N11 at the root of it: whatever the run's files name or link, the kernel decides as their owner."""
    assert NOBODY is not None
    secret = _root_only(base)
    run = _theirs(base)
    (run / "rlwatch.yaml").write_text(
        textwrap.dedent(f"""\
            profile: generic
            training: {{logs: [train.log, {secret}], checkpoint_dirs: [{secret.parent}]}}
            server: {{log: {secret}}}
            processes:
            - {{role: worker, cmdline_regex: nothingmatches_zz, log: {secret}}}
            """)
    )
    os.chown(run / "rlwatch.yaml", NOBODY.pw_uid, NOBODY.pw_gid)
    (run / "dmesg.log").symlink_to(secret)
    os.lchown(run / "dmesg.log", NOBODY.pw_uid, NOBODY.pw_gid)
    out = separated.run_as_root("report", str(run), "--json")
    assert out.returncode in (0, 1, 3), out.stderr
    assert f"works as {NOBODY.pw_name} (uid {NOBODY.pw_uid})" in out.stderr
    assert SECRET not in out.stdout and SECRET not in out.stderr
    rep = json.loads(out.stdout)
    assert rep["training"]["last_step"] == 2  # the run's own log read as usual
    # The kernel log, which nobody may not read here (dmesg_restrict), still reaches the report: root read it.
    own = separated.run_as_root("report", str(base), "--json")
    if json.loads(own.stdout)["kernel"]["available"]:
        assert rep["kernel"]["available"] and rep["kernel"]["source"] == json.loads(own.stdout)["kernel"]["source"]
    # Anything rlwatch wrote in the run is the owner's, as if they had run it themselves.
    for path in run.rglob("*"):
        assert path.lstat().st_uid == NOBODY.pw_uid, path
    helper = _helper_pid(out.stderr)
    wait_until(lambda: not Path(f"/proc/{helper}").exists(), 15)  # the helper ended with the report


def test_a_run_directory_swapped_for_roots_run_gains_nothing(separated: Runtime, base: Path) -> None:
    """N4: nobody swaps the watched directory for a link to one of root's runs mid-watch; root's run is untouched."""
    assert NOBODY is not None
    theirs = _theirs(base)
    rootrun = base / "rootrun"
    (rootrun / ".rlwatch").mkdir(parents=True)
    (rootrun / ".rlwatch").chmod(0o700)
    book = rootrun / ".rlwatch" / "launches.json"
    book.write_text('{"roles": {}}')
    before = book.read_bytes(), sorted(p.name for p in (rootrun / ".rlwatch").iterdir())
    (rootrun / "train.log").write_text("step:1 - loss:1.0\n")
    home = base / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    link = home / "run"
    theirs.rename(link)
    proc = subprocess.Popen(
        separated.as_root("watch", str(link), "--json", "--interval", "0.3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        cwd="/",
        env=separated.env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, proc.stderr.read() if proc.stderr else ""
        # The swap, as nobody could make it: their directory renamed away, a link to root's run in its place.
        link.rename(home / "run.real")
        link.symlink_to(rootrun)
        os.lchown(link, NOBODY.pw_uid, NOBODY.pw_gid)
        for _ in range(4):  # a few more rounds after the swap
            assert proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    assert (book.read_bytes(), sorted(p.name for p in (rootrun / ".rlwatch").iterdir())) == before
    for path in (home / "run.real").rglob("*"):
        assert path.lstat().st_uid == NOBODY.pw_uid, path


def test_root_helper_answers_only_its_requests(separated: Runtime, base: Path) -> None:
    """The watcher, working as the owner, gets host-wide data from root's helper, and nothing else through it."""
    assert NOBODY is not None
    run = _theirs(base)
    script = textwrap.dedent(f"""\
        import json, os, sys
        from pathlib import Path
        from rlwatch.discover.privsep import run_as_owner
        from rlwatch.sources import hostwide

        def work(said):
            helper = hostwide.current()
            out = {{"said": said, "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()]}}
            out["holders"] = helper.holders()
            helper.sock.sendall(b"/etc/shadow\\n")
            out["raw"] = json.loads(helper._reader.readline())
            try:
                helper.ask("read /etc/shadow")
            except ValueError as exc:
                out["refused"] = str(exc)
            reader = hostwide.HostWideReader(helper)
            try:
                reader.open()
                out["kernel"] = reader.name
            except Exception as exc:
                out["kernel"] = "unavailable: " + str(exc)
            print(json.dumps(out))
            return 3

        code = run_as_owner(Path({str(run)!r}), work)
        print(json.dumps({{"code": code, "uid": os.getuid()}}))
        """)
    out = subprocess.run(
        [*separated.python, "-c", script], capture_output=True, text=True, timeout=60, cwd="/", env=separated.env
    )
    assert out.returncode == 0, out.stderr
    child, parent = (json.loads(line) for line in out.stdout.splitlines())
    assert parent == {"code": 3, "uid": 0}  # root's side returned the child's status, and is root still
    got = child
    assert got["ids"] == [NOBODY.pw_uid, NOBODY.pw_uid, NOBODY.pw_gid, got["ids"][3]]
    assert 0 not in got["ids"][3]  # no group of root's kept
    assert isinstance(got["holders"], dict)
    assert got["raw"] == {"error": "unknown request"}
    assert "not a request" in got["refused"]
    assert got["kernel"]  # a reader's name, or why none works here: an answer either way


def test_a_user_who_cannot_read_rlwatch_gets_one_line(base: Path) -> None:
    """Where the owner cannot import the rest of rlwatch (a virtualenv under /root), it stops instead of going on
    as root."""
    run = _theirs(base)
    if separation_problem([PYTHON], dict(os.environ)) is None:
        pytest.skip("nobody can read this checkout and its interpreter: the refusal cannot happen here")
    out = subprocess.run(
        [PYTHON, "-m", "rlwatch", "report", str(run)], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read" in lines[0] and "sudo -u nobody" in lines[0], out.stderr
    assert not (run / ".rlwatch").exists()


def test_roots_own_run_is_watched_as_root(separated: Runtime, base: Path) -> None:
    run = base / "mine"
    run.mkdir()
    (run / "train.log").write_text("step:1 - loss:1.0\n")
    out = separated.run_as_root("report", str(run), "--json")
    assert out.returncode in (0, 1, 3), out.stderr
    assert "works as" not in out.stderr
