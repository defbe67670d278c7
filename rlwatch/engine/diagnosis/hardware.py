"""The GPUs' hardware: what NVML says of their health (DCGM's health checks are the anchor), the Xid errors the
driver reported (kernel log and NVML events), and hardware faults the run's own logs name.

A hardware fault is said as one: the node must be drained, the run resumed elsewhere; restarting it on the same GPU
only fails again. Severity follows NVIDIA: DCGM fails a GPU for any volatile double-bit ECC error, a row-remap
failure or 63 retired pages (``modules/health/DcgmHealthWatch.cpp``, ``DCGM_LIMIT_MAX_RETIRED_PAGES``), and only warns
of a pending retirement or remap, which NVIDIA documents as harmless until the next reset ("unaffected applications
can continue running", GPU memory error management, "Error Recovery and Response Flags").
"""

from __future__ import annotations

from collections.abc import Iterator

from rlwatch.common.state import Finding, GpuState, HostEvent, Snapshot
from rlwatch.common.vocab import xid_code
from rlwatch.common.words import plural
from rlwatch.engine.diagnosis.base import CRIT, INFO, WARN, Context, count_of
from rlwatch.engine.diagnosis.host import current_event, log_stopped, resume_text, run_started, tie
from rlwatch.engine.diagnosis.wording import exact_first, hhmm, last_text
from rlwatch.sources.xid import describe, recovery_action, verdict_of

RETIRED_PAGES_LIMIT = 63  # DCGM_LIMIT_MAX_RETIRED_PAGES (common/DcgmGPUHardwareLimits.h): "63 or more retired pages"
_THROTTLES = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal": "hardware thermal slowdown",
    "hw_power_brake": "power brake (the power supply asked the GPU to slow down)",
    "sw_thermal": "software thermal slowdown",
}
BUSY_UTIL = 30.0  # a PCIe link below its generation while the GPU is this busy is degraded, not saving power


def _gpu_name(g: GpuState) -> str:
    pci = g.health.pci_bus_id if g.health is not None else None
    return f"GPU {g.index}" + (f" ({pci})" if pci else "")


def _drain(s: Snapshot) -> str:
    return f"drain this node (do not restart the run on it); on another node, {resume_text(s)}"


def gpu_health(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """What NVML reports of each GPU's hardware."""
    for g in s.gpus:
        h = g.health
        if h is None:
            continue
        name = _gpu_name(g)
        if h.lost:
            yield Finding(
                CRIT,
                "gpu_lost",
                f"{name} is lost: NVML says '{h.lost}' — it fell off the bus or stopped answering. A hardware fault: "
                f"{_drain(s)}.",
                None,
            )
            continue
        faults = []
        if h.ecc_volatile_uncorrected:
            faults.append(f"{plural(h.ecc_volatile_uncorrected, 'uncorrectable ECC error')} since the driver loaded")
        if h.remap_failure:
            faults.append("a memory row could not be remapped (NVIDIA's RMA condition)")
        retired = (h.retired_sbe or 0) + (h.retired_dbe or 0)
        if retired >= RETIRED_PAGES_LIMIT:
            faults.append(f"{retired} retired memory pages (DCGM's limit is {RETIRED_PAGES_LIMIT})")
        if faults:
            yield Finding(
                CRIT,
                "gpu_memory_fault",
                f"{name} has a hardware memory fault: {'; '.join(faults)}. Work on it fails or computes wrong "
                f"values: {_drain(s)} (the GPU needs a reset or repair).",
                None,
            )
        elif h.remap_pending or h.retired_pending:
            what = "a memory row remap" if h.remap_pending else "a page retirement"
            yield Finding(
                WARN,
                "gpu_memory_pending",
                f"{name} had an uncorrectable memory error and {what} waits for the next GPU reset "
                f"({h.remap_uncorrectable or 0} rows remapped for uncorrectable errors so far). NVIDIA: running work "
                "is unaffected; plan a GPU reset (a node reboot from a pod) between runs.",
                None,
            )
        elif h.ecc_aggregate_uncorrected and not h.ecc_volatile_uncorrected:
            yield Finding(
                INFO,
                "gpu_memory_history",
                f"{name} has had {plural(h.ecc_aggregate_uncorrected, 'uncorrectable ECC error')} over its life, "
                "none since the driver loaded; the memory repaired itself (remapped rows).",
                None,
            )
        if h.pcie_width is not None and h.pcie_width_max and h.pcie_width < h.pcie_width_max:
            yield Finding(
                WARN,
                "gpu_pcie_degraded",
                f"{name}'s PCIe link runs at x{h.pcie_width} of x{h.pcie_width_max} lanes (gen {h.pcie_gen} of "
                f"{h.pcie_gen_max}): host transfers and NCCL traffic through the host are slower; a reseat or a node "
                "change fixes it.",
                None,
            )
        elif (
            h.pcie_gen is not None
            and h.pcie_gen_max
            and h.pcie_gen < h.pcie_gen_max
            and g.util is not None
            and g.util >= BUSY_UTIL
        ):
            yield Finding(
                WARN,
                "gpu_pcie_degraded",
                f"{name}'s PCIe link runs at gen {h.pcie_gen} of {h.pcie_gen_max} while {g.util:.0f}% busy (an idle "
                "GPU lowers it to save power; a busy one should not).",
                None,
            )
        slow = [_THROTTLES[r] for r in h.clock_events or () if r in _THROTTLES]
        if slow:
            numbers = ", ".join(
                x
                for x in (
                    f"{g.temp_c:.0f} °C" if g.temp_c is not None else "",
                    f"{g.power_w:.0f} W" if g.power_w is not None else "",
                    f"{g.util:.0f}% busy" if g.util is not None else "",
                )
                if x
            )
            yield Finding(
                WARN,
                "gpu_throttled",
                f"{name} is throttled: {', '.join(slow)}" + (f" ({numbers})" if numbers else "") + ". It runs "
                "slower than its peers and holds back every collective; check the node's cooling and power.",
                None,
            )


SAME_FAULT_S = 60.0  # the driver's lines, NVML's event and a repeat within this long tell of one fault


def xid_occurrences(group: list[HostEvent]) -> int:
    """How many separate faults a group of reports of one Xid on one GPU are: the kernel's Xid line, its "fallen off
    the bus" line and NVML's event for the same moment are one."""
    times = sorted(e.time for e in group if e.time is not None)
    n = 1 if len(times) < len(group) and not times else 0
    last: float | None = None
    for t in times:
        if last is None or t - last > SAME_FAULT_S:
            n += 1
        last = t
    return max(n, 1)


def _gpu_of(e: HostEvent) -> str:
    return f"gpu{e.gpu}" if e.gpu is not None else (e.pci or "?")


def _group(events: list[HostEvent]) -> dict[int, list[HostEvent]]:
    """Xid events per Xid: "fallen off the bus" without an Xid counts as Xid 79."""
    groups: dict[int, list[HostEvent]] = {}
    for e in events:
        xid = e.xid if e.kind == "xid" else 79
        if xid is not None:
            groups.setdefault(xid, []).append(e)
    return groups


def _gpus_text(group: list[HostEvent]) -> str:
    """ "GPU 0 (PCI 0000:3b:00)", or "4 GPUs (PCI 0000:dc:00, 0000:ed:00, …)"."""
    seen: dict[str, HostEvent] = {}
    for e in group:
        seen.setdefault(_gpu_of(e), e)
    if len(seen) == 1:
        e = next(iter(seen.values()))
        gpu = f"GPU {e.gpu}" if e.gpu is not None else "a GPU"
        return gpu + (f" (PCI {e.pci})" if e.pci else "")
    names = [f"{e.gpu}" if e.gpu is not None else (e.pci or "?") for e in seen.values()]
    label = "GPUs" if all(e.gpu is not None for e in seen.values()) else "GPUs (PCI"
    shown = ", ".join(names[:4]) + (" …" if len(names) > 4 else "")
    return f"{len(seen)} {label} {shown}" + (")" if label.endswith("(PCI") else "")


def xid_errors(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """NVIDIA Xid errors from the kernel log and NVML's events, one finding per Xid (the GPUs it hit listed)."""
    events = [e for e in (s.kernel.events if s.kernel else ()) if e.kind in ("xid", "fallen_off_bus")]
    for g in s.gpus:
        if g.health is not None:
            events.extend(g.health.xids)
    if not events:
        return
    since = run_started(s)
    for xid, group in sorted(_group(events).items(), key=lambda kv: kv[1][-1].time or 0.0):
        last = group[-1]
        info = describe(xid)
        verdict = verdict_of(xid, last.text)
        current = current_event(s, last, since)
        when = f" at {hhmm(last.time, s.time)}" if last.time is not None else ""
        per_gpu: dict[str, list[HostEvent]] = {}
        for e in group:
            per_gpu.setdefault(_gpu_of(e), []).append(e)
        n = sum(xid_occurrences(evs) for evs in per_gpu.values())
        times = f", {n} times" if n > 1 else ""
        pid_of = next((e for e in reversed(group) if e.pid is not None), last)
        found = tie(s, pid_of) if pid_of.pid is not None else None
        hit = f" It hit {found.who}" if found is not None else ""
        if pid_of.pid is not None and found is None:
            hit = f" It hit pid {pid_of.pid}" + (f" ({pid_of.process})" if pid_of.process else "")
        stopped = log_stopped(s, last.time)
        hit = f"{hit}{stopped}." if hit else (f" {stopped[2:].capitalize()}." if stopped else "")
        action = ""
        if xid == 154:
            action = f" The driver now asks for: {recovery_action(last.text) or 'see the line'}."
        head = f"Xid {xid} on {_gpus_text(group)}{when}{times}: {info.meaning} (NVIDIA: {info.immediate})."
        before = "" if current else " It happened before this run started."
        if verdict == "hardware":
            sev = CRIT if current else WARN
            msg = f"{head}{hit}{action}{before} A hardware fault, not the code: {info.advice}. Then {resume_text(s)}."
        elif verdict in ("degraded", "unknown"):
            sev = WARN
            msg = f"{head}{hit}{before} {info.advice[0].upper()}{info.advice[1:]}."
        elif verdict == "application":
            sev = WARN if current else INFO
            msg = f"{head}{hit}{before} {info.advice[0].upper()}{info.advice[1:]}."
        else:
            sev = INFO
            msg = f"{head}{hit}{action}{before} {info.advice[0].upper()}{info.advice[1:]}."
            causes = sorted({c for e in group if (c := _follows(e.text)) is not None})
            hard = [c for c in causes if verdict_of(c) in ("hardware", "degraded")]
            if hard and current:
                # Xid 45 names the Xid it cleans up after ("caused by previous Xid 145"): that one decides.
                sev = WARN
                named = ", ".join(f"{c} ({describe(c).meaning})" for c in hard)
                them = "hardware faults; look for them" if len(hard) > 1 else "a hardware fault; look for it"
                msg += f" It follows Xid {named}: {them} in the kernel log, the GPU may need a reset."
        yield Finding(sev, xid_code(xid), msg, last.time)


def _follows(text: str) -> int | None:
    """The Xid a line says it was caused by ("... caused by previous Xid 149")."""
    marker = text.find("previous Xid ")
    if marker < 0:
        return None
    digits = text[marker + len("previous Xid ") :].split(maxsplit=1)[0].strip(",.")
    return int(digits) if digits.isdigit() else None


def gpu_fault_in_logs(s: Snapshot, ctx: Context) -> Iterator[Finding]:
    """The run's own logs naming a hardware fault (the CUDA runtime's "uncorrectable ECC error encountered", NVML's
    "GPU is lost"): said even where neither NVML nor the kernel log can be read here."""
    n = count_of(s, "gpu_fault")
    if not n:
        return
    ev = s.events["gpu_fault"]
    line = ev.recent[-1].text.strip() if ev.recent else ""
    quoted = f": '{line[:160]}'" if line else ""
    msg = (
        f"The run's logs report a GPU hardware fault{quoted} ({plural(n, 'line')}, last {last_text(ev, s.time)}). "
        f"The GPU, not the code, failed: {_drain(s)}."
    )
    yield Finding(CRIT, "gpu_fault", msg, exact_first(ev))
