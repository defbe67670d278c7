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

import importlib.metadata
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

import rlwatch
from tests.faults.conftest import CAN_DROP_PRIVILEGES, NOBODY, PYTHON, FaultRow, as_nobody
from tests.simhost import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.slow]

REFUSED = "HTTPUtils WARNING: ConnectionRefusedError(111, \"Connect call failed ('10.0.0.1', 30000)\")\n"
PACKAGES = ("rlwatch", "tui", "widgets")
# What `python -m rlwatch` needs at run time; printed back so the probe knows which copy was imported.
PROBE = (
    "import sys, rlwatch, tui, widgets, textual, pydantic, yaml, psutil, watchfiles, prometheus_client, pynvml; "
    "print(sys.version_info[0], sys.version_info[1], rlwatch.__file__)"
)
INSIDE_CLONE = "RLWATCH_TEST_INSIDE_PRIVATE_CLONE"


if not CAN_DROP_PRIVILEGES:
    pytest.skip("needs root, setpriv and a 'nobody' user to run rlwatch unprivileged", allow_module_level=True)


@dataclass(frozen=True)
class Runtime:
    """How ``nobody`` runs this rlwatch: ``[*python, "-m", "rlwatch", ...]`` with ``env``, from ``/``."""

    python: tuple[str, ...]
    env: dict[str, str]
    how: str

    def rlwatch(self, *args: str) -> list[str]:
        return as_nobody(*self.python, "-m", "rlwatch", *args)


def _probe(python: list[str], env: dict[str, str], package_dir: Path) -> str | None:
    """None when ``nobody`` imports rlwatch and its dependencies from ``package_dir`` with ``python``; else why not."""
    try:
        out = subprocess.run(
            as_nobody(*python, "-c", PROBE),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd="/",
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except OSError as exc:
        return f"{python[0]}: {exc}"
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return f"{python[0]}: {lines[-1] if lines else f'exit {out.returncode}'}"
    major, minor, where = out.stdout.split(maxsplit=2)
    if (int(major), int(minor)) != sys.version_info[:2]:
        return f"{python[0]} is Python {major}.{minor}, not {sys.version_info[0]}.{sys.version_info[1]}"
    if Path(where.strip()).parent != package_dir:
        return f"{python[0]} imports rlwatch from {Path(where.strip()).parent}, not {package_dir}"
    return None


def _dependencies(name: str) -> list[importlib.metadata.Distribution]:
    """``name``'s installed distribution and every one it needs at run time (no extras), each once."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        current = todo.pop()
        try:
            dist = importlib.metadata.distribution(current)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional platform dependency not installed here: nothing to copy
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _copy_runtime(dest: Path) -> Path:
    """rlwatch's packages and its run-time dependencies copied into ``dest/lib``, readable by everyone."""
    lib = dest / "lib"
    for name in PACKAGES:
        source = Path(__import__(name).__file__ or "").parent
        shutil.copytree(source, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
    for dist in _dependencies("rlwatch"):
        own = dist.metadata["Name"] == "rlwatch"
        for item in dist.files or []:
            parts = Path(item).parts
            if ".." in parts or "__pycache__" in parts or (own and not parts[0].endswith(".dist-info")):
                continue  # scripts outside site-packages, bytecode, and the editable install's hooks
            target = lib / Path(item)
            source = Path(str(dist.locate_file(item)))
            if source.is_file() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
    for root, _dirs, files in os.walk(dest):
        os.chmod(root, 0o755)
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return lib


def _interpreters() -> list[str]:
    """Interpreters of this Python version that ``nobody`` may be able to start, most likely first."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = [
        getattr(sys, "_base_executable", sys.executable),
        os.path.realpath(sys.executable),
        shutil.which(f"python{version}") or "",
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ]
    return [p for p in dict.fromkeys(found) if p and os.path.isfile(p)]


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    """This rlwatch as ``nobody`` can run it (see the module's docstring), or the tests skipped with the reason."""
    here = Path(rlwatch.__file__).parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    why_not = _probe([PYTHON], env, here)
    if why_not is None:
        yield Runtime((PYTHON,), env, f"as checked out, by {PYTHON}")
        return
    base = Path(tempfile.mkdtemp(prefix="rlwatch-readable-"))
    try:
        lib = _copy_runtime(base)
        copy_env = {**env, "PYTHONPATH": str(lib), "PYTHONNOUSERSITE": "1"}
        tried = [why_not]
        for python in _interpreters():
            problem = _probe([python, "-S"], copy_env, lib / "rlwatch")
            if problem is None:
                how = f"from a readable copy in {base}, by {python} (nobody cannot use the checkout: {why_not})"
                yield Runtime((python, "-S"), copy_env, how)
                return
            tried.append(problem)
        pytest.skip(f"'nobody' can run neither this checkout nor a readable copy of it: {'; '.join(tried)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


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
