"""Free space on the volume a run writes checkpoints to.

A checkpoint directory that does not exist yet still lives on some volume, so the nearest existing parent is
measured instead of reporting nothing: the question is whether the next save fits. Inodes too (statvfs
``f_favail``): a volume of many small files (datasets, logs, sharded checkpoints) can run out of them with space left.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rlwatch.common.state import DiskState
from rlwatch.sources import one_line


def _existing(path: Path) -> Path:
    """``path`` or its nearest parent that exists; any other failure is left for disk_usage to report."""
    for candidate in (path, *path.parents):
        try:
            os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except (OSError, ValueError):
            return candidate
        return candidate
    return path


def probe_disk(path: str | Path) -> tuple[DiskState, str | None]:
    """Free and total bytes of the volume holding ``path``, or None fields and the reason."""
    where = _existing(Path(path))
    try:
        usage = shutil.disk_usage(where)
    except (OSError, ValueError) as exc:
        return DiskState(path=str(path), free_bytes=None, total_bytes=None), f"disk usage not readable: {one_line(exc)}"
    inodes_free = inodes_total = None
    try:
        st = os.statvfs(where)
        if st.f_files > 0:  # some file systems (btrfs, network mounts) report no inode counts at all
            inodes_free, inodes_total = int(st.f_favail), int(st.f_files)
    except (OSError, ValueError):
        pass
    state = DiskState(
        path=str(path),
        free_bytes=int(usage.free),
        total_bytes=int(usage.total),
        inodes_free=inodes_free,
        inodes_total=inodes_total,
    )
    return state, None


def disk_state(path: str | Path) -> DiskState:
    return probe_disk(path)[0]
