"""GPU holders: real processes holding a stand-in device file, found through /proc and classified."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import GpuHolder
from rlwatch.sources.holders import (
    HolderScanner,
    classify_holders,
    find_holders,
    gpu_index,
    scan_holders,
)
from rlwatch.sources.membership import assess
from tests.simhost import wait_until, younger_from_now_on

OPENER = "import sys, time; f = open(sys.argv[1], 'rb'); print('ready', flush=True); time.sleep(120)"
MAPPER = """
import mmap, sys, time
with open(sys.argv[1], 'r+b') as f:
    m = mmap.mmap(f.fileno(), 0)
print('ready', flush=True)
time.sleep(120)
"""
# Holds the device from a grandchild whose parent exits at once, like a leftover of an earlier run.
ORPHAN = """
import os, sys, time
f = open(sys.argv[1], 'rb')
if os.fork():
    os._exit(0)
print('ready', flush=True)
time.sleep(120)
"""
# Opens the device as root, then becomes another user, keeping the descriptor.
OTHER_USER = """
import os, sys, time
f = open(sys.argv[1], 'rb')
os.setgid(65534)
os.setuid(65534)
print('ready', flush=True)
time.sleep(120)
"""
PARENT_OF_HOLDER = """
import subprocess, sys, time
kid = subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]], stdout=subprocess.PIPE, text=True)
kid.stdout.readline()
print(kid.pid, flush=True)
time.sleep(120)
"""


class Spawner:
    """Starts test processes in their own sessions and stops exactly those process groups afterwards."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, code: str, *args: str, executable: str = sys.executable, cwd: Path | None = None
    ) -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(
            [executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            cwd=cwd,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip()

    def stop_all(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)


@pytest.fixture
def spawn() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    spawner.stop_all()


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    devdir = tmp_path / "dev"
    devdir.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "other"):
        (devdir / name).write_bytes(b"\0" * 4096)
    return devdir


def glob_of(dev: Path) -> str:
    return f"{dev}/nvidia*"


def classify(raw: dict[int, tuple[str, ...]], run_dir: Path | None = None, **kw: object) -> dict[int, GpuHolder]:
    """Classify against the live run found in ``run_dir`` (by default an empty directory: no live run)."""
    if run_dir is None:
        run_dir = Path(tempfile.mkdtemp(prefix="rlwatch-empty-"))
    args: dict[str, object] = {
        "view": assess(str(run_dir), **kw.pop("assess", {})),  # type: ignore[arg-type]
        "nvml_procs": {},
        "protected_names": ["nvidia-persistenced", "nv-hostengine", "dcgm-exporter"],
        "self_pid": os.getpid(),
        "owners": {os.geteuid()},
    }
    args.update(kw)
    return {h.pid: h for h in classify_holders(raw, **args)}  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------- finding
def test_open_and_mapped_devices_are_found(spawn: Spawner, dev: Path) -> None:
    opener, _ = spawn.start(OPENER, str(dev / "nvidia0"))
    mapper, _ = spawn.start(MAPPER, str(dev / "nvidia1"))
    bystander, _ = spawn.start(OPENER, str(dev / "other"))
    found = find_holders(glob_of(dev))
    assert found[opener.pid] == (str(dev / "nvidia0"),)
    assert found[mapper.pid] == (str(dev / "nvidia1"),)
    assert bystander.pid not in found
    assert os.getpid() not in found


def test_a_fake_proc_tree(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fd = proc / "555" / "fd"
    fd.mkdir(parents=True)
    (fd / "3").symlink_to("/dev/nvidia0")
    (fd / "4").symlink_to("/dev/nvidiactl")
    (fd / "5").symlink_to("socket:[12345]")
    (proc / "558").mkdir()  # holds the devices only as mappings: its descriptors are closed
    (proc / "558" / "maps").write_text(
        "7f00-7f01 rw-s 00000000 00:05 100 /dev/nvidia-uvm\n"
        "7f01-7f02 rw-s 00000000 00:05 101 /dev/nvidia3 (deleted)\n"
        "7f02-7f03 r-xp 00000000 08:01 102 /usr/lib/libcuda.so.1\n"
        "7f03-7f04 rw-p 00000000 00:00 0 \n"
        "garbage line\n"
    )
    (proc / "556").mkdir()  # vanished between listing and reading: nothing readable
    (proc / "557" / "fd").mkdir(parents=True)  # readable, holds nothing
    scan = scan_holders("/dev/nvidia*", proc_root=str(proc))
    assert scan.holders == {555: ("/dev/nvidia0", "/dev/nvidiactl"), 558: ("/dev/nvidia-uvm", "/dev/nvidia3")}
    assert scan.skipped == 1


def test_scanner_rereads_mappings_only_now_and_then(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "558").mkdir(parents=True)
    maps = proc / "558" / "maps"
    maps.write_text("7f00-7f01 rw-s 00000000 00:05 100 /dev/nvidia0\n")
    clock = FakeClock()
    scanner = HolderScanner("/dev/nvidia*", clock, proc_root=str(proc), maps_every_s=30)
    assert scanner.scan().holders == {558: ("/dev/nvidia0",)}
    maps.write_text("7f00-7f01 rw-s 00000000 00:05 100 /dev/nvidia1\n")
    clock.advance(10)
    assert scanner.scan().holders == {558: ("/dev/nvidia0",)}  # kept from the last read, not lost in between
    clock.advance(21)
    assert scanner.scan().holders == {558: ("/dev/nvidia1",)}
    maps.unlink()
    clock.advance(31)
    assert scanner.scan().holders == {}
    assert scanner.skipped == 1


def test_missing_proc_root_finds_nothing(tmp_path: Path) -> None:
    assert find_holders("/dev/nvidia*", proc_root=str(tmp_path / "nope")) == {}


def test_gpu_index() -> None:
    assert [gpu_index(d) for d in ("/dev/nvidia0", "/dev/nvidia12", "/dev/nvidiactl", "/dev/nvidia-uvm")] == [
        0,
        12,
        None,
        None,
    ]


# -------------------------------------------------------------------------------------------------- classifying
# Membership itself is tested in tests/test_membership.py; here the holder list carries its verdicts.
WRITER = """
import sys, time
log = open('train.log', 'a')
dev = open(sys.argv[1], 'rb')
print('ready', flush=True)
time.sleep(120)
"""


@pytest.mark.slow
def test_live_unremarkable_trainer_and_an_orphaned_leftover(spawn: Spawner, dev: Path, tmp_path: Path) -> None:
    """The host that lost a live run: `python3 train.py` in the run directory (matching no profile) beside an
    orphaned leftover holding the same GPU. Only the leftover is a stray."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    spawn.start(ORPHAN, str(dev / "nvidia0"), cwd=tmp_path)
    (orphan,) = find_holders(glob_of(dev))
    assert wait_until(lambda: psutil.Process(orphan).ppid() == 1)
    younger_from_now_on(orphan)
    live, _ = spawn.start(WRITER, str(dev / "nvidia0"), cwd=run_dir)
    assert psutil.Process(live.pid).create_time() > psutil.Process(orphan).create_time()
    raw = find_holders(glob_of(dev))
    out = classify(raw, run_dir, nvml_procs={0: {orphan: 3 * 1024**3}})
    member, zombie = out[live.pid], out[orphan]
    assert member.status == "run" and member.in_run and member.reason is None
    assert member.evidence == "writes train.log"
    assert zombie.status == "stray" and zombie.protected is None
    assert zombie.reason is not None
    assert zombie.reason.startswith("orphaned: the session that started it")
    assert "never touched" in zombie.reason and "before the live run" in zombie.reason
    assert zombie.gpu_mem_bytes == 3 * 1024**3
    assert zombie.gpus == (0,) and zombie.attribution == "nvml"
    assert member.gpus == (0,) and member.attribution == "device nodes"
    assert zombie.create_time == psutil.Process(orphan).create_time()
    assert zombie.user == psutil.Process(orphan).username()


def test_without_a_live_run_every_holder_is_unknown(spawn: Spawner, dev: Path) -> None:
    other, _ = spawn.start(OPENER, str(dev / "nvidia0"))
    out = classify(find_holders(glob_of(dev)))
    assert out[other.pid].status == "unknown"
    assert out[other.pid].reason is None
    assert (out[other.pid].evidence or "").startswith("rlwatch cannot tell what the live run is")


def test_a_holder_whose_session_lives_is_unknown(spawn: Spawner, dev: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    other, _ = spawn.start(OPENER, str(dev / "nvidia0"))  # started first, not orphaned: another job, maybe
    spawn.start(WRITER, str(dev / "nvidia1"), cwd=run_dir)
    held = classify(find_holders(glob_of(dev)), run_dir)[other.pid]
    assert held.status == "unknown" and held.reason is None
    assert "not orphaned" in (held.evidence or "")


@pytest.mark.slow
def test_a_new_child_of_the_run_is_the_runs(spawn: Spawner, dev: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _parent, kid_pid = spawn.start(PARENT_OF_HOLDER, str(dev / "nvidia0"), OPENER, cwd=run_dir)
    raw = find_holders(glob_of(dev))
    assert int(kid_pid) in raw
    out = classify(raw, run_dir)
    assert out[int(kid_pid)].in_run and out[int(kid_pid)].reason is None
    assert out[int(kid_pid)].evidence == f"works in {run_dir.resolve()}"


def test_pid_1_self_and_parents_are_protected(dev: Path) -> None:
    with open(dev / "nvidia0", "rb"):
        raw = find_holders(glob_of(dev))
        assert raw == {os.getpid(): (str(dev / "nvidia0"),)}
        raw = {**raw, 1: ("/dev/nvidia0",), os.getppid(): ("/dev/nvidia0",)}
        out = classify(raw)
    assert out[1].protected == "pid 1 (the container's init)"
    assert out[os.getpid()].protected == "rlwatch itself"
    assert out[os.getppid()].protected == "a parent of rlwatch"
    assert all(h.reason is None and not h.in_run for h in out.values())


@pytest.mark.slow
def test_daemons_are_protected_by_executable_name_only(spawn: Spawner, dev: Path, tmp_path: Path) -> None:
    daemon_exe = tmp_path / "nvidia-persistenced"
    daemon_exe.symlink_to(sys.executable)
    daemon, _ = spawn.start(OPENER, str(dev / "nvidia0"), executable=str(daemon_exe))
    # The daemon's name in an argument does not make a process a daemon.
    impostor, _ = spawn.start(OPENER, str(dev / "nvidia0"), "nvidia-persistenced")
    out = classify(find_holders(glob_of(dev)))
    assert out[daemon.pid].protected == "system daemon (nvidia-persistenced)"
    assert out[daemon.pid].reason is None
    assert out[impostor.pid].protected is None
    assert out[impostor.pid].status == "unknown"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_other_users_processes(spawn: Spawner, dev: Path) -> None:
    other, _ = spawn.start(OTHER_USER, str(dev / "nvidia0"))
    raw = find_holders(glob_of(dev))
    assert other.pid in raw
    guarded = classify(raw)[other.pid]
    assert guarded.protected is not None and guarded.protected.startswith("another user's process")
    assert guarded.reason is None
    allowed = classify(raw, owners={0, 65534})[other.pid]
    assert allowed.protected is None and allowed.status == "unknown"
    # allow_other_users with other_users naming someone else: nobody's holder stays protected (the probe's N1)
    elsewhere = classify(raw, owners={0, 1})[other.pid]
    assert elsewhere.protected is not None and elsewhere.protected.startswith("another user's process")


def test_vanished_holders_are_dropped(spawn: Spawner, dev: Path) -> None:
    proc, _ = spawn.start(OPENER, str(dev / "nvidia0"))
    raw = find_holders(glob_of(dev))
    spawn.stop_all()
    assert classify(raw) == {}
    assert proc.pid in raw


def test_a_monitor_reading_nvml_is_never_a_stray() -> None:
    """What an H200 showed (driver 580): NVML clients (pynvml, nvidia-smi) open nvidiactl, nvidia0 and nvidia-uvm but
    map at most nvidiactl; a CUDA context maps nvidia0 and nvidia-uvm. The mappings tell a monitor from a holder."""
    from rlwatch.sources.holders import _nvml_client_only

    opened = ("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl")
    assert _nvml_client_only(opened, ["/dev/nvidiactl"], None)  # pynvml, nvidia-smi -l
    assert _nvml_client_only(opened, [], None)
    cuda_maps = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert not _nvml_client_only(opened, cuda_maps, None)  # a torch process
    assert not _nvml_client_only(opened, ["/dev/nvidiactl"], 1 << 30)  # NVML says it uses GPU memory
    assert not _nvml_client_only(opened, None, None)  # maps unreadable: no verdict, never protected on a guess
    assert not _nvml_client_only(("/srv/run/dev/nvidia0",), [], None)  # a stand-in device file


def test_a_process_opening_gpu_nodes_without_mapping_them_is_protected() -> None:
    """The rule applied to a real process: it maps nothing, so holding /dev/nvidia* makes it a monitor."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holders = classify({child.pid: ("/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl")}, protected_names=())
        held = holders[child.pid]
        assert held.protected and "NVML" in held.protected and held.reason is None
    finally:
        child.kill()
        child.wait()


def test_a_monitor_in_the_run_directory_is_never_the_runs_gpu_holder(tmp_path: Path) -> None:
    """A watchdog or nvitop working in the run directory, holding the device nodes through NVML only: a monitor, not a
    holder of the run's GPU (and so not counted as the run's on the GPU)."""
    run = tmp_path / "run"
    run.mkdir()
    child = subprocess.Popen([sys.executable, "-c", "f = open('train.log', 'a'); import time; time.sleep(60)"], cwd=run)
    try:
        wait_until(lambda: (run / "train.log").exists())
        wait_until(lambda: any(p.path.endswith("train.log") for p in psutil.Process(child.pid).open_files()))
        held = classify({child.pid: ("/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl")}, run_dir=run)[child.pid]
        assert held.protected and "NVML" in held.protected
        assert not held.in_run and held.status == "protected"
    finally:
        child.kill()
        child.wait()
