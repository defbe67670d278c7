"""A stray GPU holder: a leftover of a "previous run" that keeps the stand-in device open and locked (incident 4).

It detaches with a double fork so its parent is no longer the simulator, exactly like a process that outlived its
container's last run, and then only sleeps. It takes a *shared* lock: in EXCLUSIVE_PROCESS compute mode any other
process with a context blocks a newcomer, so the server (which needs the exclusive lock) fails while even one stray
is left. It watches the supervisor pid given in its argv and ends when that is gone.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from rlwatch.sim import lifeline
from rlwatch.sim.common import Layout, base_parser
from rlwatch.sim.ledger import PieceLedger


def detach() -> None:
    """Double fork: the first parent returns to its caller at once, the grandchild is orphaned and leads a session."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    if os.fork() > 0:
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    p = base_parser(__doc__ or "")
    p.add_argument("--supervisor-pid", type=int, required=True)
    p.add_argument("--detach", action="store_true")
    args = p.parse_args(argv)
    layout = Layout.of(args.run_dir)
    if args.detach:
        detach()
    lifeline.watch(layout.alive, args.sim_id, supervisor_pid=args.supervisor_pid)
    ledger = PieceLedger(layout, "holder", "stray")
    try:
        fd = os.open(layout.device, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:
        ledger.update("failed", error=str(exc))
        return 1
    ledger.update("holding", stray_pid=os.getpid())
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
