"""rlwatch run by a second user, ``nobody``: how the tests start it so that this user can import it.

rlwatch must be readable by that user, and on a GPU pod (and on this project's machines) it often is not: the checkout,
its virtual environment or the interpreter itself sit in ``/root`` (mode 0700). So the tests run rlwatch as this
checkout and interpreter when ``nobody`` can import them from there, and otherwise from a copy of the packages
(rlwatch's and its dependencies', nothing else) in a directory anyone can read, run by an interpreter of the same
version that ``nobody`` can start; when there is none, they are skipped with the reason. Root's rlwatch working on
another user's run (privilege separation) needs the same: that user imports the rest of rlwatch after the drop.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import rlwatch


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


PYTHON = sys.executable
NOBODY = _nobody()
CAN_DROP_PRIVILEGES = os.geteuid() == 0 and shutil.which("setpriv") is not None and NOBODY is not None


def shared_dir(prefix: str, mode: int = 0o755, owner: int | None = None) -> Path:
    """A fresh directory under /tmp with ``mode`` (and ``owner``, with nobody's group): pytest's own temporary tree is
    private to root, so a second user could neither enter it nor own a directory there. The caller removes it."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, mode)
    if owner is not None:
        os.chown(d, owner, NOBODY.pw_gid if NOBODY is not None else -1)
    return d


def as_nobody(*argv: str) -> list[str]:
    """``argv`` run as the unprivileged user ``nobody`` (needs :data:`CAN_DROP_PRIVILEGES`)."""
    assert NOBODY is not None
    return ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups", "--", *argv]


PACKAGES = ("rlwatch", "tui", "widgets")
# What `python -m rlwatch` needs at run time; printed back so the probe knows which copy was imported.
PROBE = (
    "import sys, rlwatch, tui, widgets, textual, pydantic, yaml, psutil, watchfiles, prometheus_client, pynvml; "
    "print(sys.version_info[0], sys.version_info[1], rlwatch.__file__)"
)


@dataclass(frozen=True)
class Runtime:
    """How ``nobody`` runs this rlwatch: ``[*python, "-m", "rlwatch", ...]`` with ``env``, from ``/``."""

    python: tuple[str, ...]
    env: dict[str, str]
    how: str

    def rlwatch(self, *args: str) -> list[str]:
        return as_nobody(*self.python, "-m", "rlwatch", *args)

    def as_root(self, *args: str) -> list[str]:
        """The same rlwatch run by root (which then works on another user's run as that user)."""
        return [*self.python, "-m", "rlwatch", *args]

    def run_as_root(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``rlwatch ARGS`` run by root to its end, from ``/``, with nothing on its standard input."""
        return subprocess.run(
            self.as_root(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd="/",
            env=self.env,
            stdin=subprocess.DEVNULL,
        )


def _ask(argv: list[str], env: dict[str, str], name: str) -> tuple[str | None, str]:
    """Run a probe: (why it failed, in one line starting with ``name``, or None; what it printed)."""
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, check=False, cwd="/", env=env, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        return f"{name}: {exc}", ""
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return f"{name}: {lines[-1] if lines else f'exit {out.returncode}'}", out.stdout
    return None, out.stdout


def _probe(python: list[str], env: dict[str, str], package_dir: Path) -> str | None:
    """None when ``nobody`` imports rlwatch and its dependencies from ``package_dir`` with ``python``; else why not."""
    failed, said = _ask(as_nobody(*python, "-c", PROBE), env, python[0])
    if failed is not None:
        return failed
    major, minor, where = said.split(maxsplit=2)
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


# What root's rlwatch reads after it became another user (privilege separation): its interpreter's own standard
# library and packages, by the paths root started with, must be readable by that user.
SEPARATION_PROBE = (
    "import json, pwd; from pathlib import Path; from rlwatch.discover.privsep import unreadable_to, Controller; "
    "e = pwd.getpwnam('nobody'); "
    "print(json.dumps(unreadable_to(Controller(e.pw_uid, e.pw_gid, 'nobody', '/', (e.pw_gid,), Path('/')))))"
)


def separation_problem(python: list[str], env: dict[str, str]) -> str | None:
    """None when root's rlwatch, run by ``python`` with ``env``, can become ``nobody`` and still import the rest of
    itself; else why not."""
    failed, said = _ask([*python, "-c", SEPARATION_PROBE], env, python[0])
    if failed is not None:
        return failed
    bad = json.loads(said)
    return None if bad is None else f"{python[0]}: nobody cannot read {bad}"


@pytest.fixture(scope="module")
def separated() -> Iterator[Runtime]:
    """This rlwatch as root runs it so that, on another user's run, the process that became that user can still
    import what it needs: the checkout as it is, or a readable copy run by an interpreter whose standard library
    everyone can read; skipped with the reasons where there is neither."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    why_not = separation_problem([PYTHON], env)
    if why_not is None:
        yield Runtime((PYTHON,), env, f"as checked out, by {PYTHON}")
        return
    base = Path(tempfile.mkdtemp(prefix="rlwatch-readable-"))
    os.chmod(base, 0o755)
    try:
        lib = _copy_runtime(base)
        copy_env = {**env, "PYTHONPATH": str(lib), "PYTHONNOUSERSITE": "1"}
        tried = [why_not]
        for python in _interpreters():
            problem = separation_problem([python, "-S"], copy_env)
            if problem is None:
                yield Runtime((python, "-S"), copy_env, f"from a readable copy in {base}, by {python}")
                return
            tried.append(problem)
        pytest.skip(f"root's rlwatch cannot become nobody with a readable installation here: {'; '.join(tried)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
