"""What root writes, reads or tells root to run in another user's run directory: descriptors, not paths.

A second local user (``nobody``) against root's rlwatch, each case as the security probe reproduced it:

- N4(a): a run directory swapped for a link to one of root's runs while root watches it: root's launch book, the
  watchdog's state and the audit go on into the directory first opened, never into the other run's ``.rlwatch/``;
- N5: a recorded output file in a directory others can write, the directory swapped for a link: the append is
  refused (with ``openat2`` and with the component walk), the other file never changes;
- N1 (the output half): a process of another user with its stdout open read-only on a root file is never where
  root's output goes; nor is ``/proc``;
- N6: ``init`` through a run directory that is another user's link to root's: refused, root's file unchanged;
- N7: a hard link to a root-only file in another user's directory is not read; root's own runs still are;
- N3: the line ``service install`` prints for root runs a file only root can change, and the probe's swap of
  ``.rlwatch`` changes nothing it runs.

Files are given to ``nobody`` with chown and its processes started with ``Popen(user=…)``, so the kernel presents
exactly what the attack presents. The directories live under ``/tmp`` (pytest's own tree is private to root).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlwatch.common import statefiles
from rlwatch.common.clock import SystemClock
from rlwatch.common.statefiles import StateFileError, append_problem, open_append, write_file
from rlwatch.common.trust import LinkRefused, open_read
from rlwatch.config.models import ActionsConfig, Config, GpuConfig
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.audit import AuditLog
from rlwatch.remedy.actions.plan import stdout_file
from rlwatch.remedy.actions.spawn import SpawnError, spawn
from rlwatch.remedy.service import install
from rlwatch.sources import procfs
from rlwatch.sources.launches import LaunchBook
from rlwatch.sources.processes import LaunchRecord
from rlwatch.sources.watchdog_state import write_json
from tests.simhost import wait_until
from tests.unprivileged import shared_dir

try:
    NOBODY, NOGROUP = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
except KeyError:  # pragma: no cover - every Debian has it
    NOBODY = NOGROUP = -1

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or NOBODY < 0, reason="needs root and a second user (nobody)")

THIRD = 54321  # a uid no account has: a third user
PRECIOUS = "OTHER ROOT RUN LOG (must not change)\n"


@pytest.fixture
def roots() -> Iterator[Path]:
    """A directory of root's runs, 0755 like most, where ``nobody`` can look but not write."""
    d = shared_dir("rlwatch-root-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def theirs() -> Iterator[Path]:
    """``nobody``'s own 0755 directory."""
    d = shared_dir("rlwatch-nobody-", owner=NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def as_nobody(script: str, cwd: Path) -> None:
    """A shell command run as ``nobody`` to its end (the attacker's move)."""
    subprocess.run(
        ["/bin/sh", "-c", script], cwd=cwd, user=NOBODY, group=NOGROUP, extra_groups=[], check=True,
        env={"PATH": "/usr/bin:/bin"}, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip


def chown_tree(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, NOBODY, NOGROUP)


# --------------------------------------------------------------------------------------------------------- N4(a)
def test_a_run_directory_swapped_for_a_link_mid_watch_never_redirects_roots_state_files(
    roots: Path, theirs: Path
) -> None:
    """Root watches ``nobody``'s runS; ``nobody`` renames it away and links runS to root's orun. What root's watch
    writes afterwards (a new launch record, the watchdog's heartbeat, an audit line) goes into the directory it
    opened first, and orun's ``.rlwatch/`` stays byte for byte as it was."""
    orun = roots / "orun"
    orun.mkdir()
    own = LaunchRecord(("python3", str(orun / "train.py"), "4"), str(orun), None, 1.0, 4242, 2.0, uid=0)
    assert LaunchBook(orun / ".rlwatch" / "launches.json").remember("trainer", own)
    before = {p.name: p.read_bytes() for p in (orun / ".rlwatch").iterdir()}

    runs = theirs / "runS"
    runs.mkdir()
    (runs / "train.log").write_text("step:1 - loss:1\n")
    chown_tree(runs)
    cfg = Config(gpu=GpuConfig(backend="none"), actions=ActionsConfig(audit_log=".rlwatch/audit.jsonl"))
    engine = Engine(cfg, runs, clock=SystemClock())
    try:
        engine.sample()
        as_nobody(f"mv runS runS.real && ln -s {orun} runS", theirs)
        assert (theirs / "runS").resolve() == orun.resolve()
        other = LaunchRecord(("python3", "-c", "ROOT_OTHER_JOB_B"), "/", None, 3.0, 4343, 4.0, uid=0)
        assert engine.launches.remember("worker", other)
        assert engine.launches.error is None
        assert write_json(engine.run_dir / ".rlwatch" / "watchdog.json", {"run_dir": str(runs)}) is None
        assert AuditLog(engine.run_dir / ".rlwatch" / "audit.jsonl", SystemClock()).record("resume", "plan")
    finally:
        engine.stop()
    after = {p.name: p.read_bytes() for p in (orun / ".rlwatch").iterdir()}
    assert after == before  # orun's book has its own record only, and nothing else was written there
    kept = theirs / "runS.real" / ".rlwatch"
    assert sorted(p.name for p in kept.iterdir()) == ["audit.jsonl", "launches.json", "watchdog.json"]
    assert set(json.loads((kept / "launches.json").read_text())) == {"worker"}
    assert kept.stat().st_uid == 0 and stat.S_IMODE(kept.stat().st_mode) == 0o700


def test_a_state_dir_says_when_its_path_names_another_directory(roots: Path, theirs: Path) -> None:
    (roots / "orun").mkdir()
    (theirs / "run").mkdir()
    chown_tree(theirs / "run")
    state = statefiles.StateDir(theirs / "run")
    assert state.check(create=True) is None and state.moved() is None
    as_nobody(f"mv run run.real && ln -s {roots / 'orun'} run", theirs)
    moved = state.moved()
    assert moved is not None and "now names another directory" in moved and "\n" not in moved
    state.write("x.json", b"{}")
    assert (theirs / "run.real" / ".rlwatch" / "x.json").exists() and not (roots / "orun" / ".rlwatch").exists()
    state.close()


# ------------------------------------------------------------------------------------------------------------ N5
@pytest.fixture(params=["openat2", "component walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a path is resolved without links: the kernel's openat2, and the walk for kernels without it."""
    if request.param == "component walk":
        monkeypatch.setattr(statefiles, "_openat2_missing", True)
    return str(request.param)


def test_a_recorded_output_in_a_directory_others_can_write_swapped_for_a_link_is_refused(
    roots: Path, theirs: Path, started: list[subprocess.Popen[bytes]], resolver: str
) -> None:
    """Root's trainer ran ``>> ~nobody/shared/out/train.log`` (``out/`` 0777); rlwatch recorded that from the
    trainer's own writable stdout. ``nobody`` swaps ``out`` for a link to root's other run: the resume's append is
    refused before anything starts, and root's other log keeps its one line."""
    other = roots / "other"
    other.mkdir()
    (other / "train.log").write_text(PRECIOUS)
    out = theirs / "shared" / "out"
    out.mkdir(parents=True)
    chown_tree(theirs / "shared")
    out.chmod(0o777)
    log = out / "train.log"
    with open(log, "ab") as fh:
        proc = subprocess.Popen(["sleep", "60"], stdout=fh, start_new_session=True)
    started.append(proc)
    recorded = wait_until(lambda: procfs.output_file(proc.pid, 1), 5)
    assert recorded == str(log) and stdout_file(proc.pid) == str(log)
    assert append_problem(Path(recorded)) is None  # as it was: root's own file, one link, no link on the way
    as_nobody(f"mv out out.old && ln -s {other} out", theirs / "shared")

    why = append_problem(Path(recorded))
    assert why is not None and f"{out} is a symbolic link of uid {NOBODY}: not followed" in why, why
    with pytest.raises(SpawnError, match="symbolic link") as caught:
        spawn([sys.executable, "-c", "print('step:0 - loss:1.000')"], log_path=Path(recorded))
    assert "\n" not in str(caught.value)
    with pytest.raises(StateFileError, match="not followed"):
        os.close(open_append(Path(recorded)))
    assert (other / "train.log").read_text() == PRECIOUS


def test_missing_directories_of_an_output_are_never_made_through_a_link(
    roots: Path, theirs: Path, resolver: str
) -> None:
    """``mkdir -p`` followed links: ``out/new/train.log`` with ``out`` a link of ``nobody`` made ``new`` in root's
    directory. Now nothing is made there."""
    (theirs / "shared").mkdir()
    chown_tree(theirs / "shared")
    as_nobody(f"ln -s {roots} out", theirs / "shared")
    target = theirs / "shared" / "out" / "new" / "train.log"
    assert append_problem(target) is not None
    with pytest.raises(StateFileError, match="symbolic link"):
        open_append(target)
    assert not (roots / "new").exists()


# ------------------------------------------------------------------------------------------------- N1 (output)
def test_another_users_read_only_stdout_on_a_root_file_is_never_an_output_target(
    roots: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """``exec -a fake_vllm_server … 1<$ROOT_FILE`` of ``nobody``: not where root's restart writes; neither is a
    read-only stdout of root's own, nor anything under /proc, whoever holds it."""
    victim = roots / "victim_public.txt"
    victim.write_text("ROOT-OWNED PUBLIC FILE, original\n")
    victim.chmod(0o644)
    for path in (victim, Path("/proc/sys/kernel/domainname")):
        with open(path, "rb") as ro:
            theirs_p = subprocess.Popen(
                ["sleep", "60"], stdout=ro, user=NOBODY, group=NOGROUP, extra_groups=[], start_new_session=True
            )
            started.append(theirs_p)
            mine = subprocess.Popen(["sleep", "60"], stdout=ro, start_new_session=True)
            started.append(mine)
        for pid in (theirs_p.pid, mine.pid):
            wait_until(lambda pid=pid: os.path.exists(f"/proc/{pid}/fdinfo/1"), 5)
            assert os.readlink(f"/proc/{pid}/fd/1") == str(path)  # what the old code took as the target
            assert procfs.output_file(pid, 1) is None and stdout_file(pid) is None
    with open(victim, "ab") as rw:
        writer = subprocess.Popen(["sleep", "60"], stdout=rw, user=NOBODY, group=NOGROUP, start_new_session=True)
        started.append(writer)
    wait_until(lambda: os.path.exists(f"/proc/{writer.pid}/fdinfo/1"), 5)
    assert stdout_file(writer.pid) is None  # writable, but another user's process
    why = append_problem(Path("/proc/sys/kernel/domainname"))
    assert why is not None and "not a file system for output" in why
    assert victim.read_text() == "ROOT-OWNED PUBLIC FILE, original\n"


# ------------------------------------------------------------------------------------------------------------ N6
def test_init_through_a_run_directory_that_is_another_users_link_is_refused(roots: Path, theirs: Path) -> None:
    rootcfg = roots / "rootcfg"
    rootcfg.mkdir()
    own = "# ROOT OWN CONFIG\nprofile: generic\n"
    (rootcfg / "rlwatch.yaml").write_text(own)
    (rootcfg / "train.log").write_text("step:1 - loss:1\n")
    as_nobody(f"ln -s {rootcfg} run4d", theirs)
    with pytest.raises(StateFileError, match=f"run4d is a symbolic link of uid {NOBODY}: not followed"):
        write_file(theirs / "run4d" / "rlwatch.yaml", b"# generated\n")
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "init", str(theirs / "run4d"), "--force"],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "not followed" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert (rootcfg / "rlwatch.yaml").read_text() == own
    assert sorted(p.name for p in rootcfg.iterdir()) == ["rlwatch.yaml", "train.log"]  # no temporary left there


def test_write_file_still_follows_roots_own_links(roots: Path) -> None:
    (roots / "real").mkdir()
    (roots / "link").symlink_to(roots / "real")
    write_file(roots / "link" / "rlwatch.yaml", b"profile: generic\n")
    assert (roots / "real" / "rlwatch.yaml").read_bytes() == b"profile: generic\n"


# ------------------------------------------------------------------------------------------------------------ N7
def test_a_hard_link_to_a_root_only_file_in_another_users_directory_is_not_read(roots: Path, theirs: Path) -> None:
    """``nobody``'s train.log as a second name of root's 0600 secret (made here by root: with
    ``fs.protected_hardlinks=1`` the kernel stops ``nobody`` making it, with 0 it does not; the file is the same)."""
    secret = roots / "rootonly" / "secret.txt"
    secret.parent.mkdir(mode=0o700)
    secret.write_text("Traceback (most recent call last):\nRuntimeError: ROOT_ONLY_SECRET_CONTENT_7f3a\n")
    secret.chmod(0o600)
    runh = theirs / "runh"
    runh.mkdir()
    chown_tree(runh)
    os.link(secret, runh / "train.log")
    with pytest.raises(LinkRefused) as caught:
        open_read(runh / "train.log")
    assert "2 hard links" in (caught.value.strerror or "") and f"uid {NOBODY} owns" in (caught.value.strerror or "")
    report = subprocess.run(
        [sys.executable, "-m", "rlwatch", "report", str(runh), "--json"],
        capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert "ROOT_ONLY_SECRET" not in report.stdout + report.stderr and "Traceback" not in report.stderr
    # a file of a third user (one link) in their directory: neither theirs nor root's, not read either
    (runh / "train.log").unlink()
    shutil.copy(secret, runh / "third.log")
    os.chown(runh / "third.log", THIRD, THIRD)
    with pytest.raises(LinkRefused, match=f"owned by uid {THIRD}, neither by uid {NOBODY}"):
        open_read(runh / "third.log")
    # their own file in their directory, and root's own run with a hard link in it, are read as before
    (runh / "own.log").write_text("step:1 - loss:1\n")
    os.chown(runh / "own.log", NOBODY, NOGROUP)
    with open_read(runh / "own.log") as fh:
        assert fh.read() == b"step:1 - loss:1\n"
    os.link(secret, roots / "rootonly" / "again.log")
    with open_read(roots / "rootonly" / "again.log") as fh:
        assert b"ROOT_ONLY_SECRET" in fh.read()


# ------------------------------------------------------------------------------------------------------------ N3
def _only_root_can_change(path: Path) -> None:
    """Every directory from / to ``path``, and ``path``, root's and writable by nobody else (a sticky directory
    such as /tmp only above a directory of root's), and none a symbolic link."""
    chain = [*reversed(path.parents), path]
    for i, p in enumerate(chain):
        st = os.lstat(p)
        assert not stat.S_ISLNK(st.st_mode), p
        assert st.st_uid == 0, f"{p} belongs to uid {st.st_uid}"
        if st.st_mode & 0o022:
            assert st.st_mode & stat.S_ISVTX and i + 1 < len(chain) and os.lstat(chain[i + 1]).st_uid == 0, p


def test_the_hook_line_for_root_runs_only_a_file_root_alone_can_change(
    theirs: Path, roots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run9 = theirs / "run9"
    run9.mkdir()
    (run9 / "train.log").write_text("step:1 - loss:1\n")
    chown_tree(run9)
    home = roots / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "service", "install", str(run9), "--mode", "hook"],
        capture_output=True, text=True, timeout=120, check=False, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [m.group(1) for m in re.finditer(r"setsid sh (\S+) >/dev/null", done.stdout)]
    assert len(lines) == 2 and lines[0] == lines[1], done.stdout
    hook = Path(lines[0])
    assert not hook.is_relative_to(run9)
    _only_root_can_change(hook)
    logfile = re.search(r"stdout_logfile=(\S+)", done.stdout)
    assert logfile is not None and not Path(logfile.group(1)).is_relative_to(run9)
    _only_root_can_change(Path(logfile.group(1)).parent)

    # the probe's swap, and the hook run as root: nothing of nobody's runs
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    pwned = roots / "HOOK_PWNED"
    installed = install(run9, mode="hook", rlwatch=[sys.executable, "-c", "pass"])
    assert list(installed.files) == [str(hook)]
    as_nobody(
        'mkdir -p .rlwatch && printf \'#!/bin/sh\\necho "hook ran as uid $(id -u)" > '
        f"{pwned}\\n' > .rlwatch/start-watchdog.sh",
        run9,
    )
    ran = subprocess.run(["sh", str(hook)], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert not pwned.exists()


def test_the_hook_of_roots_own_run_stays_in_its_state_directory(roots: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(roots / "state"))
    run = roots / "run"
    run.mkdir()
    done = install(run, mode="hook", rlwatch=["/opt/rlwatch"])
    assert list(done.files) == [str(run / ".rlwatch" / "start-watchdog.sh")]
    assert not (roots / "state").exists()


def test_no_safe_place_for_the_hook_is_refused_with_the_reason(
    theirs: Path, roots: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run9 = theirs / "run9"
    run9.mkdir()
    chown_tree(run9)
    monkeypatch.setenv("XDG_STATE_HOME", str(theirs))  # nobody's directory: no place for root's hook
    env = {**os.environ, "XDG_STATE_HOME": str(theirs)}
    done = subprocess.run(
        [sys.executable, "-m", "rlwatch", "service", "install", str(run9), "--mode", "hook"],
        capture_output=True, text=True, timeout=120, check=False, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"belongs to uid {NOBODY}" in done.stderr and "needs root" not in done.stderr, done.stderr
    assert not (run9 / ".rlwatch").exists() and not (theirs / "rlwatch").exists()
