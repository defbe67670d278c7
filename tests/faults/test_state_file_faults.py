"""The run's own state files under fault: recover info and trainer state half-written or corrupt, checkpoint
directories deleted while they are being scanned; and rlwatch's own files in ``.rlwatch/`` subverted: a symbolic link
planted at every name it writes, a launch book someone else owns, a state directory others can write."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.export.report import to_json_dict, to_text
from rlwatch.remedy.actions.audit import AuditLog
from rlwatch.remedy.actions.spawn import SpawnError, spawn
from rlwatch.remedy.service import hook_text, install
from rlwatch.sources.launches import LaunchBook
from rlwatch.sources.processes import LaunchRecord
from rlwatch.sources.watchdog_state import PidLock, read_status, request_rearm, write_json
from tests.faults.conftest import NOBODY, FaultRow, make_engine, run_cli, source_error

pytestmark = pytest.mark.faults

STEP_INFO = {"epoch": 1, "epoch_step": 934, "global_step": 1869, "steps_per_epoch": 935}


def step_info_text(info: dict[str, int]) -> str:
    return json.dumps(info, indent=4)  # as AReaL's rank 0 writes it, in place


@pytest.mark.parametrize("damage", ["half-written", "corrupt"])
def test_step_info(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], damage: str) -> None:
    row = fault_row(
        f"files: step_info.json {damage}",
        "recover shown as not available with the reason (never a guessed step); back as soon as it is whole",
    )
    recover = tmp_path / "ckpt" / "recover_info" / "step_info.json"
    recover.parent.mkdir(parents=True)
    recover.write_text(step_info_text(STEP_INFO))
    engine = make_engine(
        tmp_path, {"training": {"checkpoint_dirs": ["ckpt"], "recover_info": "ckpt/recover_info/step_info.json"}}
    )
    snap = engine.collect_once()
    assert snap.recover is not None and snap.recover.resume_global_step == 1870
    whole = step_info_text(STEP_INFO)
    recover.write_text(whole[: len(whole) // 2] if damage == "half-written" else "\x00\xff{garbage")
    engine.sample()
    snap = engine.build()
    error = source_error(snap, "recover")
    assert snap.recover is None and error is not None and "incomplete or corrupt" in error
    assert to_json_dict(snap)["recover"] is None
    assert "recover: recover info incomplete or corrupt" in to_text(snap)
    row.saw(f"recover null; report says {error.split(':')[0]!r}")
    recover.write_text(step_info_text({**STEP_INFO, "epoch_step": 0, "epoch": 2, "global_step": 1870}))
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert snap.recover is not None and snap.recover.resume_global_step == 1871
    assert source_error(snap, "recover") is None
    row.saw("rewritten whole: resume step 1871, error cleared")


def test_step_info_rewritten_while_read(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "files: step_info.json rewritten in place while it is read",
        "every read is either a whole record or 'not available'; never an exception or a wrong step",
    )
    recover = tmp_path / "recover_info" / "step_info.json"
    recover.parent.mkdir(parents=True)
    recover.write_text(step_info_text(STEP_INFO))
    engine = make_engine(tmp_path, {"training": {"recover_info": "recover_info/step_info.json"}})
    stop = threading.Event()
    written: set[int] = {1869}

    def writer() -> None:
        step = 1869
        while not stop.is_set():
            step += 1
            text = step_info_text({**STEP_INFO, "epoch_step": step % 935, "global_step": step})
            written.add(step)
            with recover.open("w") as f:  # truncate, then two writes: a reader can land between them
                f.write(text[:20])
                f.flush()
                f.write(text[20:])

    thread = threading.Thread(target=writer)
    thread.start()
    whole = broken = 0
    try:
        for _ in range(300):
            engine.sample()
            snap = engine.build()
            if snap.recover is None:
                assert source_error(snap, "recover") is not None
                broken += 1
            else:
                assert snap.recover.global_step in written
                whole += 1
    finally:
        stop.set()
        thread.join()
        engine.stop()
    assert whole > 0
    row.saw(f"300 reads during rewrites: {whole} whole records, {broken} 'not available', 0 wrong, 0 exceptions")


@pytest.mark.parametrize("damage", ["half-written", "corrupt"])
def test_trainer_state(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], damage: str) -> None:
    row = fault_row(
        f"files: trainer_state.json {damage}",
        "the checkpoint still listed, the state file named as unreadable, last known total kept; clears when whole",
    )
    ckpt = tmp_path / "out" / "checkpoint-25"
    ckpt.mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(b"\0" * 1000)
    state = {"global_step": 25, "max_steps": 250, "logging_steps": 5, "log_history": [{"loss": 0.5, "step": 25}]}
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    engine = make_engine(tmp_path, {"training": {"checkpoint_dirs": ["out"]}})
    snap = engine.collect_once()
    assert snap.training is not None and snap.training.total_steps == 250
    text = json.dumps({**state, "global_step": 30}, indent=2, sort_keys=True)
    (ckpt / "trainer_state.json").write_text(text[: len(text) // 2] if damage == "half-written" else "[1, 2")
    engine.sample()
    snap = engine.build()
    error = source_error(snap, "checkpoints")
    assert error is not None and "trainer_state.json" in error
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 25 and snap.training is not None and snap.training.total_steps == 250
    row.saw("checkpoint-25 still the latest; 'checkpoints: trainer_state.json incomplete or corrupt'; total 250 kept")
    (ckpt / "trainer_state.json").write_text(text)
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert source_error(snap, "checkpoints") is None
    row.saw("whole again: error cleared")


@pytest.mark.slow
def test_checkpoints_deleted_while_scanned(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "files: a checkpoint directory deleted while being scanned",
        "no error escapes; the latest checkpoint that still exists is shown; none once all are gone; found again",
    )
    root = tmp_path / "out"
    for step in range(10, 410, 10):
        d = root / f"checkpoint-{step}"
        (d / "shards").mkdir(parents=True)
        for i in range(30):
            (d / "shards" / f"part-{i}.bin").write_bytes(b"\0" * 100)
    engine = make_engine(tmp_path, {"training": {"checkpoint_dirs": ["out"]}})
    snap = engine.collect_once()
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 400

    def deleter() -> None:
        # File by file, newest checkpoint first: the scanner keeps sizing a directory that is emptying under it.
        for step in range(400, 0, -10):
            ckpt = root / f"checkpoint-{step}"
            for part in sorted((ckpt / "shards").iterdir()):
                part.unlink()
                os.sched_yield()
            shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)

    thread = threading.Thread(target=deleter)
    thread.start()
    seen: list[int] = []
    scans = 0
    while thread.is_alive():
        engine.sample()
        snap = engine.build()
        latest = snap.checkpoint.latest if snap.checkpoint else None
        if latest is not None and latest.global_step is not None:
            seen.append(latest.global_step)
        scans += 1
    thread.join()
    engine.sample()
    snap = engine.build()
    assert snap.checkpoint is not None and snap.checkpoint.latest is None and snap.checkpoint.count == 0
    error = source_error(snap, "checkpoints")
    assert error is not None and "not found" in error
    assert seen == sorted(seen, reverse=True)  # never a checkpoint that was already gone coming back
    row.saw(
        f"{scans} scans while 1200 files were deleted, latest shown falling {max(seen, default=0)}→"
        f"{min(seen, default=0)}; then none and 'checkpoint dir not found: …/out'"
    )
    (root / "checkpoint-500").mkdir(parents=True)
    (root / "checkpoint-500" / "model.safetensors").write_bytes(b"\0" * 10)
    engine.sample()
    snap = engine.build()
    engine.stop()
    assert snap.checkpoint is not None and snap.checkpoint.latest is not None
    assert snap.checkpoint.latest.global_step == 500 and source_error(snap, "checkpoints") is None
    row.saw("re-created: checkpoint-500 found, error cleared")


# ------------------------------------------------------------------------------------------ rlwatch's own files
PRECIOUS = b"precious: must never change\n"
RECORD = LaunchRecord(("python3", "launch.py"), "/srv/run", {"TOKEN": "t0k3n"}, 1.0, 42, 2.0, uid=os.geteuid())


def saw(row: FaultRow, tmp_path: Path, text: str) -> None:
    """The row without the test's temporary directory in every path."""
    row.saw(text.replace(str(tmp_path), "$TMP"))


def victim_file(tmp_path: Path) -> Path:
    """The file outside the run that a planted link points at: as root, it could be any file on the machine."""
    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    victim.chmod(0o644)
    return victim


def run_with_state(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / ".rlwatch").mkdir(parents=True, mode=0o700)
    return run


def plant(run: Path, name: str, target: Path) -> Path:
    link = run / ".rlwatch" / name
    link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    link.symlink_to(target)
    return link


def untouched(victim: Path) -> None:
    assert victim.read_bytes() == PRECIOUS and stat.S_IMODE(victim.stat().st_mode) == 0o644


def _launch_book(run: Path, link: Path) -> str:
    book = LaunchBook(link)
    assert book.distrust is not None and "symbolic link: refused" in book.distrust and book.get("trainer") is None
    assert book.remember("trainer", RECORD) and book.error is None
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o600  # the link replaced, not followed
    return f"{book.distrust}; then the link itself replaced by a 0600 book"


def _old_tmp_name(run: Path, link: Path) -> str:
    book = LaunchBook(run / ".rlwatch" / "launches.json")
    assert book.remember("trainer", RECORD) and book.error is None
    assert link.is_symlink() and LaunchBook(run / ".rlwatch" / "launches.json").get("trainer") == RECORD
    return "never opened (the temporary name is private and random): link left alone, book written beside it"


def _audit(run: Path, link: Path) -> str:
    log = AuditLog(link, SystemClock())
    assert log.record("resume", "plan", targets=[]) is False
    assert log.error is not None and "symbolic link: refused" in log.error and "\n" not in log.error
    return log.error


def _pidfile(run: Path, link: Path) -> str:
    acquired, why = PidLock(link).acquire()
    assert not acquired and why is not None and "symbolic link: refused" in why
    return f"lock not taken (the watchdog only watches): {why}"


def _state_json(run: Path, link: Path) -> str:
    status, error = read_status(run, time.time())
    assert status is None and error is not None and "symbolic link: refused" in error
    assert write_json(link, {"pid": os.getpid(), "heartbeat": time.time()}) is None
    assert not link.is_symlink()
    return f"read: {error}; the heartbeat's rename replaced the link"


def _rearm(run: Path, link: Path) -> str:
    assert request_rearm(run, None, time.time()) is None
    assert not link.is_symlink()
    return "request written by rename over the link"


def _child_log(run: Path, link: Path) -> str:
    with pytest.raises(SpawnError) as caught:
        spawn([sys.executable, "-c", "print('started')"], log_path=link)
    why = str(caught.value)
    assert "symbolic link: refused" in why and "\n" not in why
    return f"nothing started: {why}"


def _hook(run: Path, link: Path) -> str:
    done = install(run, mode="hook", rlwatch=["/opt/rlwatch"])
    assert not link.is_symlink() and stat.S_IMODE(link.stat().st_mode) == 0o700
    assert list(done.files) == [str(run.resolve() / ".rlwatch" / "start-watchdog.sh")]
    return "hook written by rename over the link (0700)"


def _hook_log(run: Path, link: Path) -> str:
    hook = run.parent / "hook.sh"
    hook.write_text(hook_text([sys.executable, "-c", "pass"], run))
    done = subprocess.run(["sh", str(hook)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1 and "symbolic link; not starting" in done.stderr
    return f"hook exits 1: {done.stderr.strip()}"


PLANTED: dict[str, tuple[str, Callable[[Path, Path], str]]] = {
    "launches.json": ("launch book", _launch_book),
    "launches.tmp": ("launch book's former temporary name", _old_tmp_name),
    ".launches.json.tmp": ("a guess at the temporary name", _old_tmp_name),
    "audit.jsonl": ("audit log", _audit),
    "watchdog.pid": ("watchdog pidfile", _pidfile),
    "watchdog.json": ("watchdog state / heartbeat", _state_json),
    "rearm.json": ("re-arm request", _rearm),
    "logs/worker.log": ("output log of a started process", _child_log),
    "start-watchdog.sh": ("start-up hook", _hook),
    "watchdog.log": ("start-up hook's log", _hook_log),
    "start-watchdog.lock": ("start-up hook's lock", _hook_log),
}


@pytest.mark.parametrize("name", list(PLANTED))
def test_symlink_planted_at_a_state_file(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], name: str) -> None:
    what, exercise = PLANTED[name]
    row = fault_row(
        f"state: symlink at .rlwatch/{name} ({what}) → a file outside",
        "the file outside unchanged; the link refused with one line, or replaced by rename, never written through",
    )
    victim = victim_file(tmp_path)
    run = run_with_state(tmp_path)
    link = plant(run, name, victim)
    saw(row, tmp_path, exercise(run, link))
    untouched(victim)
    saw(row, tmp_path, "victim unchanged")


@pytest.mark.parametrize("name", [".rlwatch", ".rlwatch/logs"])
def test_state_directory_is_a_symlink(tmp_path: Path, fault_row: Callable[[str, str], FaultRow], name: str) -> None:
    row = fault_row(
        f"state: {name} is a symlink to a directory outside",
        "nothing written there: launch book, audit log, pidfile, state and logs each refused in one line",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    run = tmp_path / "run"
    run.mkdir()
    if name == ".rlwatch/logs":
        (run / ".rlwatch").mkdir(mode=0o700)
    (run / name).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SpawnError) as caught:
        spawn([sys.executable, "-c", "pass"], log_path=run / ".rlwatch" / "logs" / "w.log")
    assert "symbolic link: refused" in str(caught.value)
    if name == ".rlwatch":
        book = LaunchBook(run / ".rlwatch" / "launches.json")
        book.remember("trainer", RECORD)
        assert book.distrust is not None and "symbolic link: refused" in book.distrust
        assert book.error is not None and "symbolic link: refused" in book.error
        audit = AuditLog(run / ".rlwatch" / "audit.jsonl", SystemClock())
        assert not audit.record("resume", "plan")
        acquired, why = PidLock(run / ".rlwatch" / "watchdog.pid").acquire()
        assert not acquired and why is not None and "symbolic link" in why
        assert write_json(run / ".rlwatch" / "watchdog.json", {"pid": 1}) is not None
        saw(row, tmp_path, f"launch book: {book.distrust}")
    assert list(elsewhere.iterdir()) == []
    saw(row, tmp_path, f"logs: {caught.value}; nothing created outside")


def _book(run: Path) -> Path:
    path = run / ".rlwatch" / "launches.json"
    assert LaunchBook(path).remember("launcher", RECORD)
    assert LaunchBook(path).get("launcher") == RECORD
    return path


def _resume_refusal(run: Path) -> str:
    from rlwatch.remedy.actions.api import Actions

    engine = make_engine(run)
    try:
        plan = Actions(engine).prepare("resume").plan
    finally:
        engine.stop()
    assert plan.refused is not None
    return plan.refused


@pytest.mark.skipif(os.geteuid() != 0 or NOBODY is None, reason="chown to another user needs root and 'nobody'")
def test_foreign_owned_launch_book(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "state: launch book owned by another user",
        "its command lines never run: records ignored, the refusal names the owner in the plan and as a source",
    )
    assert NOBODY is not None
    run = run_with_state(tmp_path)
    path = _book(run)
    os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
    book = LaunchBook(path)
    assert book.get("launcher") is None
    assert book.distrust == f"launch book {path} is owned by uid {NOBODY.pw_uid}: not trusted"
    refusal = _resume_refusal(run)
    assert book.distrust in refusal
    saw(row, tmp_path, f"resume refused: {refusal!r}")
    out = run_cli("report", str(run), "--json")
    assert "Traceback" not in out.stderr
    source = next(s for s in json.loads(out.stdout)["sources"] if s["name"] == "state files")
    assert not source["ok"] and book.distrust in source["error"]
    saw(row, tmp_path, "report --json: 'state files' source degraded with the same line")


def test_launch_book_writable_by_others(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "state: launch book writable by group or others",
        "its records ignored with the mode named; the plan that needed one says so",
    )
    run = run_with_state(tmp_path)
    path = _book(run)
    path.chmod(0o664)
    book = LaunchBook(path)
    assert book.get("launcher") is None
    assert book.distrust == f"launch book {path} is writable by others (mode 0664): not trusted"
    refusal = _resume_refusal(run)
    assert refusal.endswith(book.distrust)
    saw(row, tmp_path, f"resume refused: {refusal!r}")


def _refused_everywhere(run: Path, needle: str) -> list[str]:
    """Every reader and writer of ``.rlwatch/`` refuses, each with one line holding ``needle``."""
    seen = []
    book = LaunchBook(run / ".rlwatch" / "launches.json")
    assert book.get("launcher") is None and book.remember("launcher", RECORD)  # kept in memory only
    assert book.distrust is not None and needle in book.distrust
    assert book.error is not None and needle in book.error
    seen.append(book.distrust)
    audit = AuditLog(run / ".rlwatch" / "audit.jsonl", SystemClock())
    assert not audit.record("resume", "plan") and audit.error is not None and needle in audit.error
    acquired, why = PidLock(run / ".rlwatch" / "watchdog.pid").acquire()
    assert not acquired and why is not None and needle in why
    status, error = read_status(run, time.time())
    assert status is None and error is not None and needle in error
    written = write_json(run / ".rlwatch" / "watchdog.json", {"pid": 1})
    assert written is not None and needle in written
    with pytest.raises(SpawnError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        spawn([sys.executable, "-c", "pass"], log_path=run / ".rlwatch" / "logs" / "w.log")
    out = run_cli("report", str(run), "--json")
    assert "Traceback" not in out.stderr and out.returncode in (0, 1, 3), out.stderr
    sources = {s["name"]: s for s in json.loads(out.stdout)["sources"]}
    for name in ("state files", "watchdog"):
        assert not sources[name]["ok"] and needle in sources[name]["error"]
    seen.append(f"report: 'state files' and 'watchdog' sources degraded: {sources['watchdog']['error']!r}")
    return seen


def test_group_writable_state_dir(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "state: .rlwatch writable by group or others",
        "nothing read or written there: launch book, audit, pidfile, state, logs refused in one line; report says so",
    )
    run = run_with_state(tmp_path)
    _book(run)
    (run / ".rlwatch").chmod(0o777)
    (run / ".rlwatch" / "watchdog.json").write_text('{"pid": 1}')
    for line in _refused_everywhere(run, "writable by group or others (mode 0777): not trusted"):
        saw(row, tmp_path, line)
    assert not (run / ".rlwatch" / "audit.jsonl").exists() and not (run / ".rlwatch" / "logs").exists()


@pytest.mark.skipif(os.geteuid() != 0 or NOBODY is None, reason="chown to another user needs root and 'nobody'")
def test_foreign_owned_state_dir(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "state: .rlwatch owned by another user",
        "nothing read or written there (that user could plant links in it); each access refused in one line",
    )
    assert NOBODY is not None
    run = run_with_state(tmp_path)
    _book(run)
    os.chown(run / ".rlwatch", NOBODY.pw_uid, NOBODY.pw_gid)
    for line in _refused_everywhere(run, f"owned by uid {NOBODY.pw_uid}, not by this user"):
        saw(row, tmp_path, line)


def test_new_state_dir_is_private(tmp_path: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "state: .rlwatch made by rlwatch under a permissive umask",
        "the directory 0700, the launch book 0600: the environments kept for restarts readable by nobody else",
    )
    run = tmp_path / "run"
    run.mkdir()
    old = os.umask(0)
    try:
        assert LaunchBook(run / ".rlwatch" / "launches.json").remember("launcher", RECORD)
        assert AuditLog(run / ".rlwatch" / "audit.jsonl", SystemClock()).record("resume", "plan")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [run / ".rlwatch", *(run / ".rlwatch").iterdir()]}
    assert modes == {".rlwatch": 0o700, "launches.json": 0o600, "audit.jsonl": 0o640}
    saw(row, tmp_path, ", ".join(f"{k} {v:04o}" for k, v in modes.items()))
