"""One "node" of a distributed job, for the end-to-end tests: run as the first process of a PID namespace of its own
(``unshare --pid --fork --mount-proc --uts``), it names the node, starts its ranks with torchrun's environment in its
run directory, and runs ``rlwatch watch RUN --prometheus`` beside them, as a real node would.

    python3 tests/jobnode.py NAME RUN_DIR PORT NODE_RANK RANKS_PER_NODE STUCK_RANK LAST_STEP

Each rank logs ``[rankR]: step N/1000`` every 0.5 s up to LAST_STEP, then stands: the STUCK_RANK in
``fetch_batch_from_service`` (blocked reading a socket that never answers), every other rank in ``all_reduce`` (a wait
that never ends, as NCCL's does when a peer never comes). When this process ends (its unshare ended), the kernel ends every process of the
namespace (the test starts it with ``unshare --kill-child``): nothing outlives the test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

RANK = """\
import os, socket, sys, threading, time

rank = int(os.environ["RANK"])
last, stuck = int(sys.argv[1]), int(sys.argv[2])
log = open("train.log", "a", buffering=1)


def all_reduce():
    threading.Event().wait()  # stands where NCCL's all_reduce waits for a peer that never comes


def fetch_batch_from_service():
    a, b = socket.socketpair()
    return a.recv(1)  # a data service that never answers


def main():
    for step in range(1, last + 1):
        time.sleep(0.5)
        log.write(f"[rank{rank}]: step {step}/1000 loss {1 / step:.4f}\\n")
    if rank == stuck:
        fetch_batch_from_service()
    all_reduce()


main()
"""


def main() -> int:
    name, run, port, node, per_node, stuck, last = sys.argv[1:8]
    try:
        socket.sethostname(name)
    except (AttributeError, OSError) as e:
        print(f"jobnode: cannot name the node {name}: {e}", file=sys.stderr)
        return 2
    run_dir = Path(run)
    (run_dir / "train.py").write_text(RANK)
    world = 2 * int(per_node)
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")}
    ranks = []
    for local in range(int(per_node)):
        rank = int(node) * int(per_node) + local
        env = {
            **base,
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "exp-42",
            "GROUP_RANK": node,
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": per_node,
        }
        ranks.append(subprocess.Popen([sys.executable, "-u", "train.py", last, stuck], cwd=run_dir, env=env))
    watch = subprocess.Popen(
        [sys.executable, "-m", "rlwatch", "watch", str(run_dir), "--prometheus", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=open(run_dir / "watch.err", "wb"),  # noqa: SIM115  (the namespace's end closes it)
    )
    return watch.wait()  # until the test ends the namespace (unshare --kill-child)


if __name__ == "__main__":
    sys.exit(main())
