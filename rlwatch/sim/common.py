"""What every simulator piece shares: the run directory's layout, the common arguments, and atomic file writes.

Every piece is started as ``python -m rlwatch.sim.<piece> --sim-id UUID --run-dir DIR ...`` so that an explicit
regex over its command line (never a broad name) recognises it, and so that running the same argv again (as
``rlwatch act`` does) reproduces the same piece in the same run.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPERIMENT = "gsm8k-grpo"
TRIAL = "trial0"
DEVICE_NAME = "nvidia0"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "root"


@dataclass(frozen=True)
class Layout:
    """Where an AReaL-style run keeps its files, with ``cluster.fileroot`` set to the run directory."""

    run_dir: Path
    user: str = ""

    @classmethod
    def of(cls, run_dir: str | os.PathLike[str]) -> Layout:
        return cls(Path(run_dir).absolute(), _user())

    # AReaL: {fileroot}/logs/{user}/{exp}/{trial}/ and {fileroot}/checkpoints/{user}/{exp}/{trial}/
    @property
    def trial_rel(self) -> str:
        return f"{self.user}/{EXPERIMENT}/{TRIAL}"

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "logs" / self.trial_rel

    @property
    def trainer_log(self) -> Path:
        return self.log_dir / "trainer.log"

    @property
    def server_log(self) -> Path:
        return self.log_dir / "llm_server.log"

    @property
    def wandb_log(self) -> Path:
        return self.log_dir / "wandb" / "output.log"

    @property
    def launcher_log(self) -> Path:
        return self.run_dir / "logs" / "launcher.log"

    @property
    def container_log(self) -> Path:
        return self.run_dir / "logs" / "container.log"

    @property
    def trl_trainer_log(self) -> Path:
        return self.run_dir / "logs" / "train.log"

    @property
    def trl_server_log(self) -> Path:
        return self.run_dir / "logs" / "vllm_server.log"

    @property
    def trl_output(self) -> Path:
        return self.run_dir / "output"

    def worker_log(self, index: int) -> Path:
        return self.run_dir / "logs" / f"worker-{index}.log"

    @property
    def ckpt_root(self) -> Path:
        return self.run_dir / "checkpoints" / self.trial_rel

    @property
    def ckpt_dir(self) -> Path:
        return self.ckpt_root / "default"

    @property
    def recover_dir(self) -> Path:
        return self.ckpt_root / "recover_info"

    @property
    def step_info(self) -> Path:
        return self.recover_dir / "step_info.json"

    @property
    def config_yaml(self) -> Path:
        return self.run_dir / "config.yaml"

    @property
    def rlwatch_yaml(self) -> Path:
        return self.run_dir / "rlwatch.yaml"

    @property
    def device(self) -> Path:
        return self.run_dir / "dev" / DEVICE_NAME

    @property
    def sim_dir(self) -> Path:
        return self.run_dir / ".sim"

    @property
    def alive(self) -> Path:
        return self.sim_dir / "alive"

    @property
    def parts_dir(self) -> Path:
        return self.sim_dir / "ledger.d"

    @property
    def ledger(self) -> Path:
        return self.sim_dir / "ledger.json"

    @property
    def gpu_state(self) -> Path:
        return self.sim_dir / "gpu_state.json"

    @property
    def spec(self) -> Path:
        return self.sim_dir / "spec.json"

    @property
    def faults_dir(self) -> Path:
        return self.sim_dir / "faults"

    @property
    def repo_dir(self) -> Path:
        return self.run_dir / "repo"

    @property
    def train_script(self) -> Path:
        return self.run_dir / "train_grpo.py"

    # A run started by hand in its directory (scenarios trl-colocated, nccl-timeout): `python3 train.py > train.log`
    # or `torchrun ... train.py > torchrun.log`, with no rlwatch.yaml.
    @property
    def user_script(self) -> Path:
        return self.run_dir / "train.py"

    @property
    def user_log(self) -> Path:
        return self.run_dir / "train.log"

    @property
    def torchrun_log(self) -> Path:
        return self.run_dir / "torchrun.log"

    @property
    def torchrun_bin(self) -> Path:
        return self.sim_dir / "bin" / "torchrun"

    def rel(self, path: Path) -> str:
        """A path as the ledger names it: relative to the run directory when inside it."""
        try:
            return path.absolute().relative_to(self.run_dir).as_posix()
        except ValueError:
            return str(path)


def scaled(seconds: float, speed: float, floor: float = 0.01) -> float:
    """A demo-speed interval shortened by ``speed``; never zero, so loops still yield the CPU."""
    return max(floor, seconds / speed)


SIM_ENV = "RLWATCH_SIM_ID"
"""The environment variable that tags the processes of a run with an unremarkable command line (``python3 train.py``)
with their simulation's id, since their argv cannot carry it. Children inherit it; stopping finds them by it."""


def tagged(environ: dict[str, str] | None, cmdline: list[str] | None, sim_id: str) -> bool:
    """Whether a process (its environment and argv, as psutil gives them) belongs to simulation ``sim_id``."""
    return sim_id in (cmdline or []) or (environ or {}).get(SIM_ENV) == sim_id


def piece_argv(piece: str, sim_id: str, run_dir: Path, *extra: str) -> list[str]:
    """The argv of one piece. The fixed prefix is what the rlwatch.yaml regexes anchor on."""
    return [sys.executable, "-m", f"rlwatch.sim.{piece}", "--sim-id", sim_id, "--run-dir", str(run_dir), *extra]


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--sim-id", required=True)
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--speed", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    return p


def atomic_write_text(path: Path, text: str) -> None:
    """Write a whole file so that a reader in another process sees the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_write_json(path: Path, data: object, indent: int | None = None) -> None:
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def read_json(path: Path) -> object | None:
    """A JSON file, or None when it is missing, half-written or not JSON."""
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


KERNEL_LOG = "dmesg.log"  # what a person saves with `dmesg > dmesg.log` beside the run; the simulated kernel's


def write_kernel_log(layout: Layout, *messages: str) -> None:
    """Append lines to the run's ``dmesg.log`` as the kernel would print them, stamped with the real time since
    boot (``CLOCK_BOOTTIME``, as printk's timestamps and dmesg -T use it), in one write."""
    since = time.clock_gettime(time.CLOCK_BOOTTIME)
    text = "".join(f"[{since + i * 1e-6:12.6f}] {m}\n" for i, m in enumerate(messages))
    fd = os.open(layout.run_dir / KERNEL_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def claim_fault(layout: Layout, name: str) -> bool:
    """Take a one-shot fault token; True exactly once per token.

    Faults are armed once by the supervisor so that re-running the launch script (a resume) is not hit by the same
    injected failure again, exactly as a real re-run after a one-off crash is not.
    """
    try:
        os.unlink(layout.faults_dir / name)
    except OSError:
        return False
    return True


def sleep_until(deadline: float) -> None:
    """Sleep until a monotonic deadline (no-op when it has passed)."""
    left = deadline - time.monotonic()
    if left > 0:
        time.sleep(left)


def load_spec(layout: Layout) -> dict[str, Any]:
    """The run's parameters, written once by the supervisor (``.sim/spec.json``); empty when unreadable."""
    data = read_json(layout.spec)
    return data if isinstance(data, dict) else {}


def parse_with_spec(
    piece: str,
    description: str,
    argv: list[str] | None,
    command_help: str = "the command line this process stands in for (informational)",
) -> tuple[argparse.Namespace, Layout, dict[str, Any]] | None:
    """Parse the argv of a piece that stands in for a real command line, and read the run's spec.

    None, after one line on stderr, when there is no spec: the piece was started outside a simulation and has no
    port or parameters to run against.
    """
    p = base_parser(description)
    p.add_argument("command", nargs="*", help=command_help)
    args = p.parse_args(argv)
    layout = Layout.of(args.run_dir)
    spec = load_spec(layout)
    if "port" not in spec:
        print(f"rlwatch.sim.{piece}: no simulation spec in {layout.sim_dir}", file=sys.stderr)
        return None
    return args, layout, spec


@contextmanager
def holding_device(layout: Layout) -> Iterator[None]:
    """Keep the simulated device open for the duration, as a CUDA context holds ``/dev/nvidia0`` for a process's
    life, so that rlwatch finds the holder by its open file. A missing device is not an error."""
    try:
        fd = os.open(layout.device, os.O_RDWR)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.close(fd)


def spawn_piece(
    argv: list[str],
    log: Path | None,
    cwd: Path,
    *,
    executable: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start a child in its own session (rlwatch signals process groups) with its output appended to ``log``, as
    AReaL's ``cmd 2>&1 | tee -a <log>`` does; with no log its output is dropped. ``executable`` runs a program under
    another ``argv[0]`` (``python3 train.py``); ``env`` replaces the environment."""
    if log is None:
        return subprocess.Popen(
            argv,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            executable=executable,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )


def python3_argv(*args: str) -> tuple[list[str], str, dict[str, str]]:
    """``python3 ARGS`` as a person types it in an activated virtual environment: argv, the interpreter that really
    runs, and an environment whose PATH finds that interpreter first as ``python3``, so that it starts with its own
    site-packages (Python finds its prefix from ``argv[0]`` through PATH)."""
    bindir = os.path.dirname(sys.executable)
    name = "python3" if os.path.exists(os.path.join(bindir, "python3")) else os.path.basename(sys.executable)
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    return [name, *args], sys.executable, env
