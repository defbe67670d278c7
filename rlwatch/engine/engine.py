"""The engine: runs every source, feeds the event counter, diagnoses, and publishes immutable snapshots.

:class:`Engine` is the one name the commands, the dashboard and the watchdog use; its work lives in parts, one
module per concern, each layer built on the one below (engine/base):

- ``reading``: the logs read and counted, and the preview (diagnosis first on a big backlog);
- ``tracking``: which processes are the run's, its members and attempts over time, the processes table;
- ``stack_targets``: whose stacks to read, the capture on a hang, the sampler;
- ``host_round``: one sampling round of the host's sources, and the server's probe;
- ``assembly``: the snapshot built from the latest parts and diagnosed in one call;
- ``once``: the one-shot look a report takes;
- ``loops``: the threads (logs, host rounds, server, Ray) and their waits.
"""

from __future__ import annotations

from pathlib import Path

from rlwatch.common.clock import Clock
from rlwatch.config.models import Config
from rlwatch.engine.host_round import HISTORY, HOLDER_IDLE_SCAN_S, HOLDER_SCAN_S, Ring
from rlwatch.engine.loops import IDLE_SAMPLE_S, RELEASE_AFTER_BYTES, RELEASE_EVERY_S, STOPPED_SAMPLE_S, Loops
from rlwatch.engine.once import UNSEEN_WRITER_WAIT_S
from rlwatch.engine.reading import PREVIEW_FIRST_WAIT_S, PREVIEW_SAMPLE_WAIT_S, PREVIEW_WAIT_S
from rlwatch.engine.tracking import HOST_ROLES, MAX_MEMBER_ROWS
from rlwatch.sources.gpu import GpuBackend

# Every public name this module had before the engine was parted stays importable from it.
__all__ = [
    "HISTORY",
    "HOLDER_IDLE_SCAN_S",
    "HOLDER_SCAN_S",
    "HOST_ROLES",
    "IDLE_SAMPLE_S",
    "MAX_MEMBER_ROWS",
    "PREVIEW_FIRST_WAIT_S",
    "PREVIEW_SAMPLE_WAIT_S",
    "PREVIEW_WAIT_S",
    "RELEASE_AFTER_BYTES",
    "RELEASE_EVERY_S",
    "STOPPED_SAMPLE_S",
    "UNSEEN_WRITER_WAIT_S",
    "Engine",
    "Ring",
]


class Engine(Loops):
    """One monitored host. Construct, then either ``collect_once()`` (report) or ``start()`` (dashboard, watch).

    Each part sets up its own state, bottom-up, so a part's setup may use what the parts below it made."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        *,
        clock: Clock | None = None,
        gpu_backend: GpuBackend | None = None,
        proc_root: str = "/proc",
        force_polling: bool = False,
        host: str | None = None,
    ) -> None:
        super().__init__(cfg, run_dir, clock=clock, proc_root=proc_root, host=host)

        self._setup_reading(force_polling=force_polling)
        self._setup_tracking()
        self._setup_stacks()
        self._setup_host_round(gpu_backend)
        self._setup_once()
        if cfg.provenance.ignored:  # what an untrusted file said and rlwatch did not use (discover/load): never silent
            self._ok("config", "; ".join(cfg.provenance.ignored) + " (the file is not trusted)")
