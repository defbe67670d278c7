"""A container's start command (incident 2): ``git clone`` the code, then run the launch script.

On the first boot the clone works and training starts. When the trainer reaches the step where the platform takes the
container down, this process kills the whole tree with SIGKILL and exits, printing nothing, exactly like a terminal
that just closed. Every later boot finds ``repo`` already there, so ``git clone`` fails and the container exits 128;
the supervisor (the platform) starts it again every ~17 s, for ever.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import psutil

from rlwatch.sim import commands, formats, lifeline
from rlwatch.sim.common import Layout, base_parser, spawn_piece
from rlwatch.sim.ledger import LogSink, PartsReader, PieceLedger, latest

REPO_URL = "https://github.com/example-org/gsm8k-grpo.git"


def kill_tree(root: int) -> None:
    """SIGKILL a process and everything below it; the root first, so no parent lives to report its children."""
    try:
        top = psutil.Process(root)
        procs = [top, *top.children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--boot", type=int, default=1)
    args = p.parse_args(argv)
    layout = Layout.of(args.run_dir)
    lifeline.watch(layout.alive, args.sim_id)
    ledger = PieceLedger(layout, "container")
    out = LogSink(ledger)
    out.write(f"[{formats.stamp_iso()}] rlwatch-sim start: container boot {args.boot} (hostname {os.uname().nodename})")
    out.write("+ git clone " + REPO_URL + " repo")
    out.write("Cloning into 'repo'...")
    if layout.repo_dir.exists():
        out.write("fatal: destination path 'repo' already exists and is not an empty directory.")
        ledger.update("exited", exit_code=128)
        return 128
    (layout.repo_dir / ".git").mkdir(parents=True, exist_ok=True)
    (layout.repo_dir / "README.md").write_text("# gsm8k-grpo\n")
    out.write(
        f"+ python3 -m areal.launcher.local gsm8k_grpo.py --config config.yaml 2>&1 | tee -a "
        f"{layout.rel(layout.launcher_log)}"
    )
    launcher = spawn_piece(
        commands.launcher(args.sim_id, layout.run_dir, args.speed, args.seed, "areal"),
        layout.launcher_log,
        layout.run_dir,
    )
    ledger.update("running", launcher_pid=launcher.pid)
    parts = PartsReader(layout)
    while launcher.poll() is None:
        trainer = latest(parts.read(), "trainer")
        if trainer is not None and trainer.get("state") == "doomed":
            kill_tree(launcher.pid)
            launcher.wait()
            ledger.update("crashed", exit_code=137)
            os._exit(137)
        time.sleep(0.1)
    ledger.update("exited", exit_code=launcher.returncode)
    return launcher.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
