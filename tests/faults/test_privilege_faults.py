"""rlwatch run as an unprivileged user (``setpriv``): logs it may not read, other users' /proc entries.

The run directory is made outside pytest's private temporary tree, since an unprivileged user cannot enter that.
rlwatch itself must be readable by that user too, and on a GPU pod it often is not: the checkout and its virtual
environment sit in ``/root`` (mode 0700). So the tests run rlwatch as this checkout and interpreter when ``nobody``
can import them from there, and otherwise from a copy of the packages (rlwatch's and its dependencies', nothing
else) in a directory anyone can read, run by an interpreter of the same version that ``nobody`` can start; when
there is none, they are skipped with the reason. The last test proves it: it clones this repository into a
directory only root can enter, with a virtual environment there, and runs these tests from the clone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import FaultRow
from tests.simhost import wait_until
from tests.unprivileged import CAN_DROP_PRIVILEGES, NOBODY, Runtime

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"
INSIDE_CLONE = "RLWATCH_TEST_INSIDE_PRIVATE_CLONE"
if not CAN_DROP_PRIVILEGES:
    pytest.skip("needs root, setpriv and a 'nobody' user to run rlwatch unprivileged", allow_module_level=True)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    """A run directory the unprivileged user owns."""
    assert NOBODY is not None
    base = Path(tempfile.mkdtemp(prefix="rlwatch-faults-"))
    base.chmod(0o755)
    run = base / "run"
    run.mkdir()
    os.chown(run, NOBODY.pw_uid, NOBODY.pw_gid)
    yield run
    shutil.rmtree(base, ignore_errors=True)


def records(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_unprivileged_watch_with_an_unreadable_log(
    runtime: Runtime,
    run_dir: Path,
    tmp_path: Path,
    procs: list[subprocess.Popen[bytes]],
    fault_row: Callable[[str, str], FaultRow],
) -> None:
    denied = fault_row(
        "files: permission denied on a log",
        "a 'logs' source record names the file; the other log counted; its lines counted once readable",
    )
    unpriv = fault_row(
        "process: running as an unprivileged user",
        "watch runs, other users' processes are a named blind spot (holders), exits cleanly on SIGTERM",
    )
    secret = run_dir / "trainer.log"
    secret.write_text(REFUSED * 2)
    secret.chmod(0o600)  # root's, unreadable for the watcher
    open_log = run_dir / "server.log"
    open_log.write_text(REFUSED)
    assert NOBODY is not None
    os.chown(open_log, NOBODY.pw_uid, NOBODY.pw_gid)
    (run_dir / "rlwatch.yaml").write_text(
        "training:\n  logs: ['trainer.log', 'server.log']\ngpu:\n  backend: none\ninterval_s: 0.2\n"
    )
    out = tmp_path / "watch.jsonl"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            runtime.rlwatch("watch", str(run_dir), "--json"),
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd="/",
            env=runtime.env,
        )
    procs.append(proc)

    def source(name: str, ok: bool) -> dict[str, Any] | None:
        return next(
            (r for r in records(out) if r.get("type") == "source" and r["name"] == name and r["ok"] is ok), None
        )

    down = wait_until(lambda: source("logs", False), 15)
    assert "trainer.log" in down["error"] and "permission denied" in down["error"]
    first = next(r for r in records(out) if r.get("type") == "state")
    assert first["events"].get("connection_refused") == 1
    denied.saw(f"source record {down['error'].rsplit('/', 1)[-1]!r}; server.log's 1 event counted")
    holders = wait_until(lambda: source("holders", False), 15)
    assert "not readable" in holders["error"]
    secret.chmod(0o644)
    wait_until(lambda: source("logs", True), 15)
    events = [r for r in records(out) if r.get("type") == "event" and r["kind"] == "connection_refused"]
    assert events and events[-1]["count"] == 3
    denied.saw("after chmod 644: 'logs' available again, total exactly 3")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in err
    unpriv.saw(
        f"ran as uid {NOBODY.pw_uid} {runtime.how}; holders: {holders['error']!r}; SIGTERM → exit 0, no traceback"
    )


def test_unprivileged_report(runtime: Runtime, run_dir: Path, fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "process: permission denied on other users' /proc/<pid>/fd",
        "report still complete JSON; the holder scan says it could not look into those processes",
    )
    (run_dir / "trainer.log").write_text(REFUSED)
    out = subprocess.run(
        runtime.rlwatch("report", str(run_dir), "--json"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd="/",
        env=runtime.env,
    )
    assert out.returncode in (0, 1), out.stderr
    assert "Traceback" not in out.stderr
    rep = json.loads(out.stdout)
    holders = next(s for s in rep["sources"] if s["name"] == "holders")
    assert not holders["ok"] and "not readable" in holders["error"]
    assert rep["events"]["connection_refused"]["count"] == 1
    row.saw(f"exit {out.returncode}, JSON complete; holders: {holders['error']!r}")


def test_unprivileged_unreadable_configuration(
    runtime: Runtime, run_dir: Path, fault_row: Callable[[str, str], FaultRow]
) -> None:
    row = fault_row(
        "input: a configuration file the user cannot read (root's, mode 0600)",
        "the real command exits 2 with one line naming the file: permission denied",
    )
    secret = run_dir.parent / "secret.yaml"
    secret.write_text("interval_s: 1\n")
    secret.chmod(0o600)  # root's: unreadable for nobody
    out = subprocess.run(
        runtime.rlwatch("report", str(run_dir), "--config", str(secret)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd="/",
        env=runtime.env,
    )
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and str(secret) in lines[0], out.stderr
    assert "ermission denied" in out.stderr and out.stdout == ""
    row.saw(lines[0].replace(str(run_dir.parent) + "/", ""))


INNER_TIMEOUT_S = 150  # under the outer test's own limit (its timeout mark), which pytest enforces


def _said(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


@pytest.mark.skipif(INSIDE_CLONE in os.environ, reason="already running inside the private clone")
# The inner run's own limit (150 s) must end first, under pytest's (120 s by default): then a slow run fails with the
# inner output, not a bare timeout of the outer test.
@pytest.mark.timeout(300)
def test_privilege_tests_pass_from_a_clone_only_root_can_enter(fault_row: Callable[[str, str], FaultRow]) -> None:
    row = fault_row(
        "install: repository cloned where only root can enter (as /root on a GPU pod), its venv beside it",
        "the tests that run rlwatch as 'nobody' still run, from a readable copy, and pass; none skipped",
    )
    repo = Path(__file__).resolve().parents[2]
    if not (repo / ".git").exists() or shutil.which("git") is None:
        pytest.skip(f"{repo} is not a git checkout (or git is missing): nothing to clone")
    private = Path(tempfile.mkdtemp(prefix="rlwatch-private-"))  # mode 0700, like /root
    try:
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        clone = private / "rlwatch"
        subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(clone)],
            check=True,
            timeout=120,
            capture_output=True,
        )
        # A virtual environment inside the private directory, holding this one's packages by a path file (no copy):
        # its interpreter path and the clone are out of nobody's reach, as a fresh `make .venv` in /root is.
        venv = private / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        inner = venv / "bin" / "python"
        where = subprocess.run(
            [str(inner), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        (Path(where) / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        try:
            done = subprocess.run(
                [
                    str(inner),
                    "-m",
                    "pytest",
                    "-q",
                    "-rs",
                    "-p",
                    "no:cacheprovider",
                    "-m",
                    "",
                    "-p",
                    "tests.faults.table",
                    "-k",
                    "not clone_only_root",
                    "tests/faults/test_privilege_faults.py",
                ],
                cwd=clone,
                env={**os.environ, INSIDE_CLONE: "1", "RLWATCH_FAULTS_JSON": str(private / "rows.json")},
                capture_output=True,
                text=True,
                timeout=INNER_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:  # the inner run's output, not a bare timeout
            said = (_said(exc.stdout) + _said(exc.stderr)).strip().splitlines()
            pytest.fail(f"the inner run took over {INNER_TIMEOUT_S} s:\n" + "\n".join(said[-30:]))
        tail = (done.stdout + done.stderr).strip().splitlines()
        summary = tail[-1] if tail else ""
        assert done.returncode == 0, "\n".join(tail[-30:])
        others = [n for n in globals() if n.startswith("test_") and "clone_only_root" not in n]  # every other test here
        assert f"{len(others)} passed" in summary and "skipped" not in summary, summary
        rows = json.loads((private / "rows.json").read_text())
        ran = next(r["observed"] for r in rows if r["fault"] == "process: running as an unprivileged user")
        assert "from a readable copy" in ran, ran  # nobody could not use the clone itself
        row.saw(
            f"clone in a 0700 directory with its own venv: {summary}; {ran.split(';')[0].replace(str(private), '…')}"
        )
    finally:
        shutil.rmtree(private, ignore_errors=True)
