"""torchrun's elastic agent for one node (scenario ``nccl-timeout``): ``torchrun --nproc-per-node N train.py``.

The supervisor writes a ``torchrun`` script into ``.sim/bin`` and runs it with the interpreter, so ``ps`` shows
``python .../bin/torchrun --nproc-per-node 2 train.py`` as on a real host. Like torch 2.11's agent it prints its
OMP_NUM_THREADS banner, starts one ``python -u train.py`` per rank with RANK, LOCAL_RANK and WORLD_SIZE set and its
own output shared, and watches them. When a rank fails it sends the others SIGTERM ("Sending process N closing signal
SIGTERM"), reports the failed rank, its own traceback and the ``ChildFailedError`` block (the ranks it stopped under
"Failures", the first failure as "Root Cause"), and exits 1 (tests/real/torchrun-nccl-timeout-2gpu/torchrun.log).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from rlwatch.sim import formats, lifeline
from rlwatch.sim.common import Layout, load_spec
from rlwatch.sim.ledger import LogSink, PieceLedger

SCRIPT = """\
#!{python}
# torchrun for this simulated host: the elastic agent stand-in in rlwatch.sim.torchrun.
import sys

from rlwatch.sim.torchrun import main

if __name__ == "__main__":
    sys.exit(main())
"""
GRACE_S = 5.0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="torchrun")
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1)
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    layout = Layout.of(os.getcwd())
    spec = load_spec(layout)
    if "sim_id" in spec:
        lifeline.watch(layout.alive, str(spec["sim_id"]))
    ledger = PieceLedger(layout, "launcher", "torchrun")
    out = LogSink(ledger)
    me = os.getpid()
    if args.nproc_per_node > 1:
        for line in formats.TORCHRUN_BANNER:
            out.write(formats.torch_pylog("W", me, "torch/distributed/run.py:851", line))
    sys.stdout.flush()
    ranks: dict[int, subprocess.Popen[bytes]] = {}
    for rank in range(args.nproc_per_node):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "GROUP_RANK": "0",
            "WORLD_SIZE": str(args.nproc_per_node),
            "LOCAL_WORLD_SIZE": str(args.nproc_per_node),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "OMP_NUM_THREADS": "1",
        }
        ranks[rank] = subprocess.Popen([sys.executable, "-u", args.script, *args.args], env=env)
    ledger.update("running", rank_pids={str(r): proc.pid for r, proc in ranks.items()})
    root: tuple[int, int, int] | None = None
    while root is None:
        for rank, proc in ranks.items():
            code = proc.poll()
            if code is not None and code != 0:
                root = (rank, code, proc.pid)
                break
        else:
            if all(proc.poll() == 0 for proc in ranks.values()):
                ledger.update("exited", exit_code=0)
                return 0
            time.sleep(0.05)
    victims: list[tuple[int, int, int]] = []
    others = [(rank, proc) for rank, proc in ranks.items() if rank != root[0] and proc.poll() is None]
    for _rank, proc in others:
        out.write(
            formats.torch_pylog(
                "W",
                me,
                "torch/distributed/elastic/multiprocessing/api.py:1012",
                f"Sending process {proc.pid} closing signal SIGTERM",
            )
        )
        proc.send_signal(signal.SIGTERM)
    for rank, proc in others:
        try:
            code = proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        victims.append((rank, code, proc.pid))
    out.write(formats.torchrun_child_failed(me, args.script, socket.gethostname(), sys.executable, root, victims))
    ledger.update("exited", exit_code=1, root_rank=root[0], root_exitcode=root[1])
    return 1


if __name__ == "__main__":
    sys.exit(main())
