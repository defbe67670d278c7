"""On a machine with an NVIDIA GPU: a real CUDA process holding GPU memory beside a live run process is found
through /proc and NVML. It is not orphaned (this test, alive, started it), so rlwatch cannot call it a stray: a plain
`rlwatch act kill-zombies` plans nothing and says why, naming the pid. Named with `--pid`, it is stopped and its
memory is seen freed, while the run's process on the same GPU is left alone and refused even when named. Skips
wherever NVML or torch with CUDA is missing. (An orphaned leftover beside a live `python3 train.py`, killed without
being named, is tests/test_live_run_gpu.py.)

Only processes this test starts are ever signalled: a named kill touches exactly the pid named.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.gpu

GIB = 1024**3
ALLOC_BYTES = 2 * GIB
ALLOC = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda:0")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(600)
"""


def _nvml_index() -> int:
    """The NVML index of the GPU the children's cuda:0 is (PCI bus order, as NVML counts)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


@pytest.fixture(scope="module")
def nvml() -> Iterator[Any]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # library missing, no driver, no device: all mean "no GPU here"
        pytest.skip(f"NVML not usable here: {type(exc).__name__}: {exc}")
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if probe.stdout.strip() != "True":
            pytest.skip("torch with CUDA is not importable here")
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def used_bytes(nvml: Any, index: int) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(index)).used)


def nvml_pids(nvml: Any, index: int) -> dict[int, int | None]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return {}
    return {int(p.pid): p.usedGpuMemory for p in procs}


class Allocs:
    """CUDA processes started by this test, each holding ``ALLOC_BYTES`` on cuda:0; stopped at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self) -> subprocess.Popen[str]:
        env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        proc = subprocess.Popen(
            [sys.executable, "-c", ALLOC, str(ALLOC_BYTES)],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            env=env,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", "the CUDA allocation did not succeed"
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def allocs() -> Iterator[Allocs]:
    a = Allocs()
    yield a
    a.stop()


def act(run_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", "act", "kill-zombies", str(run_dir), *flags],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_kill_zombies_frees_a_real_gpu_and_spares_the_run(tmp_path: Path, nvml: Any, allocs: Allocs) -> None:
    index = _nvml_index()
    baseline = used_bytes(nvml, index)
    run = allocs.start()
    stray = allocs.start()
    pidfile = tmp_path / "run.pid"
    pidfile.write_text(f"{run.pid}\n")
    config = {
        "gpu": {"backend": "nvml", "device_glob": "/dev/nvidia*"},
        "processes": [{"role": "trainer", "pidfile": str(pidfile)}],
        "actions": {"grace_s": 5.0},
    }
    (tmp_path / "rlwatch.yaml").write_text(yaml.safe_dump(config))
    listed = nvml_pids(nvml, index)
    before = used_bytes(nvml, index)
    assert before - baseline >= 2 * ALLOC_BYTES * 0.9, "the two allocations do not show in NVML"

    dry = act(tmp_path, "--dry-run")
    planned = {int(pid) for pid in re.findall(r"^  stop  pid (\d+)", dry.stdout, re.MULTILINE)}
    assert stray.pid not in planned and run.pid not in planned, dry.stdout
    # unknown, left alone, and the way to name it is said
    assert dry.returncode == 1 and f"pid {stray.pid}: " in dry.stdout and "--pid PID" in dry.stdout, dry.stdout

    named_run = act(tmp_path, "--dry-run", "--pid", str(run.pid))
    assert named_run.returncode == 1 and "refused" in named_run.stdout, named_run.stdout

    named = act(tmp_path, "--dry-run", "--pid", str(stray.pid))
    targets = {int(pid) for pid in re.findall(r"^  stop  pid (\d+)", named.stdout, re.MULTILINE)}
    assert named.returncode == 0 and targets == {stray.pid}, named.stdout + named.stderr

    done = act(tmp_path, "--yes", "--pid", str(stray.pid))
    assert done.returncode == 0, done.stdout + done.stderr
    assert stray.wait(timeout=30) is not None
    assert run.poll() is None, "the run's own process was touched"

    deadline = time.monotonic() + 30.0
    after = used_bytes(nvml, index)
    while before - after < 1.5 * GIB and time.monotonic() < deadline:
        time.sleep(0.05)
        after = used_bytes(nvml, index)
    print(
        f"\nkill-zombies --pid on GPU {index}: run pid {run.pid} (alive), stray pid {stray.pid} (gone); "
        f"NVML listed pids {sorted(listed)}; used {before / GIB:.2f} GiB before, {after / GIB:.2f} GiB after "
        f"(freed {(before - after) / GIB:.2f} GiB)\n{done.stdout}"
    )
    assert before - after >= 1.5 * GIB
