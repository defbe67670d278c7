"""The GPUs: stray holders, memory held from outside this container, idle devices beside a run that needs them."""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import (
    Finding,
    Snapshot,
)
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import (
    CRIT,
    INFO,
    WARN,
    Context,
    count_of,
    only_history,
    per_file,
)
from rlwatch.engine.diagnosis.wording import (
    exact_first,
    human_bytes,
    last_text,
)

OUTSIDE_MIN_BYTES = 1024**3  # less than this held outside is not worth a finding


# CUDA's "CUDA-capable device(s) is/are busy or unavailable", counted in words that agree with the count.
_BUSY_ERROR = "CUDA 'device busy or unavailable' error"


def gpu(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """GPU holders and held memory. Killing is advised only for strays — holders with positive reasons — and
    never for memory held outside this container, which no kill from here can reach."""
    strays = s.zombies
    # An earlier attempt's processes still writing are named by their own finding (diagnosis/attempts).
    earlier = {pid for a in s.live_run.attempts if not a.current for pid in a.pids} if s.live_run else set()
    unknown = tuple(h for h in s.unknown_holders if h.pid not in earlier)
    busy = count_of(s, "cuda_busy")
    busy_now = bool(busy) and not only_history(s, "cuda_busy")
    modes = {g.compute_mode for g in s.gpus if g.compute_mode}
    mode = f" Compute mode {'/'.join(sorted(modes))}." if modes else ""
    if strays:
        pids = ", ".join(str(h.pid) for h in strays[:6])
        yield Finding(
            CRIT if busy_now else WARN,
            "gpu_strays",
            f"{plural(len(strays), 'stray process')} {'holds' if len(strays) == 1 else 'hold'} the GPU (pid {pids}): "
            f"{strays[0].reason}.{mode}",
            min(h.create_time for h in strays),
            action="kill-zombies",
        )
    if unknown:
        first = unknown[0]
        pids = ", ".join(str(h.pid) for h in unknown[:6])
        yield Finding(
            WARN if busy_now else INFO,
            "gpu_unknown_holders",
            f"{plural(len(unknown), 'process')} outside the live run {'holds' if len(unknown) == 1 else 'hold'} "
            f"the GPU (pid {pids}) and rlwatch cannot tell what they are — pid {first.pid}: {first.evidence}. "
            "It will not stop them on its own.",
            min(h.create_time for h in unknown),
            command=f"rlwatch act kill-zombies --pid {first.pid}",
        )
    outside = [g for g in s.gpus if g.outside_bytes and g.outside_bytes >= OUTSIDE_MIN_BYTES]
    if outside:
        where = "; ".join(
            f"GPU {g.index}: {human_bytes(g.outside_bytes)}"
            + (f" (NVML pid {', '.join(map(str, g.outside_pids[:4]))}, not visible here)" if g.outside_pids else "")
            for g in outside
        )
        cause = " — that is why the device is busy or unavailable" if busy_now and not strays else ""
        yield Finding(
            CRIT if busy_now and not strays else INFO,
            "gpu_outside",
            f"GPU memory is held by processes outside this container{cause}: {where}. No kill from here can reach "
            "them; restarting the pod frees them.",
            None,
        )
    if busy:
        ev = s.events["cuda_busy"]
        history = only_history(s, "cuda_busy")
        yield Finding(
            INFO if history else CRIT,
            "device_busy",
            f"{plural(busy, _BUSY_ERROR)}{per_file(s, 'cuda_busy')}, "
            f"last {last_text(ev, s.time)}" + ("; the device has been usable since." if history else "."),
            exact_first(ev),
            action="kill-zombies" if strays and not history else None,  # the strays are what holds it
        )
    if s.gpu is not None and not s.gpu.available and s.gpu.backend != "none":
        yield Finding(INFO, "gpu_unavailable", f"GPU data not available: {s.gpu.error}.", None)
