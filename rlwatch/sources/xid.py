"""NVIDIA Xid errors: what each means and what to do about it, for the ones that end or threaten training runs.

An Xid is the driver's report of a GPU error, printed to the kernel log as ``NVRM: Xid (PCI:0000:3b:00): 79, ...``
and delivered by NVML's event API. The number alone says whether the program or the machine is at fault, which is
what a person on call must decide first: restart the run, or move it off this node.

Sources, for every entry below unless its comment says otherwise:

- *Catalog*: NVIDIA's Xid catalog for Ampere and newer GPUs, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
  (mnemonic, description, "Resolution Bucket (Immediate Action)" and "(Investigatory Action)"), read from the
  machine-readable copy leptonai/gpud generates from it (``components/accelerator/nvidia/xid/catalog_generated.go``,
  "Generated at 2025-10-29T00:35:32Z", gpud commit 4a8de33a3f02e207f39e9023d67125592d599731). The bucket names are
  NVIDIA's: RESTART_APP, RESET_GPU, RESTART_BM (reboot the bare-metal node), CONTACT_SUPPORT, IGNORE, and
  WORKFLOW_XID_nn (a decision procedure in the catalog).
- *Retirement*: NVIDIA's dynamic page retirement doc, https://docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html
  ("XID 48: A DBE has occurred. XID 63: A page has successfully been retired. XID 64: A page has failed retirement").
- *Memory*: NVIDIA's GPU memory error management doc, https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/ (row
  remapping, contained/uncontained errors, the recovery action flag Xid 154 reports).
- *DCGM*: NVIDIA/DCGM ``dcgmlib/src/DcgmKmsgReader.cpp`` (commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824) treats
  Xids 79, 119 and 120 as fatal: after one, DCGM stops calling NVML for that GPU.

``verdict`` is rlwatch's reading of the buckets for a person renting a pod, who cannot reset a GPU or reboot the
node: ``hardware`` (the GPU or node needs a reset, reboot or repair: drain it, resume elsewhere), ``degraded`` (the
hardware works but is failing: plan to move), ``application`` (NVIDIA's first action is to restart the program; most
often the program's own bug), ``secondary`` (follows another error or a killed process: look at what came before),
``info``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    mnemonic: str
    meaning: str
    immediate: str  # NVIDIA's immediate-action bucket
    investigatory: str  # NVIDIA's investigatory-action bucket
    verdict: str  # "hardware" | "degraded" | "application" | "secondary" | "info"
    advice: str


_DRAIN = (
    "the GPU needs a reset or the node a reboot, which cannot be done from inside a pod: drain this node (do not "
    "restart the run on it) and move the run to another"
)
_APP = (
    "restart the run; it is most often the program's own fault (an illegal memory access in a kernel). If it comes "
    "back on this GPU only, suspect the hardware"
)

_CATALOG: tuple[XidInfo, ...] = (
    # Catalog: ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT, "GPU stopped processing", RESTART_APP / CONTACT_SUPPORT.
    XidInfo(
        8,
        "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT",
        "GPU stopped processing",
        "RESTART_APP",
        "CONTACT_SUPPORT",
        "application",
        _APP,
    ),
    # Catalog: ROBUST_CHANNEL_GR_EXCEPTION, "Graphics Engine Exception", RESTART_APP / WORKFLOW_XID_13.
    XidInfo(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        "Graphics Engine Exception (an SM fault: illegal address or instruction in a kernel)",
        "RESTART_APP",
        "WORKFLOW_XID_13",
        "application",
        _APP,
    ),
    # Catalog: ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT, "GPU memory page fault", RESTART_APP / WORKFLOW_XID_31.
    XidInfo(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault (a kernel touched an unmapped address)",
        "RESTART_APP",
        "WORKFLOW_XID_31",
        "application",
        _APP,
    ),
    # Catalog: ROBUST_CHANNEL_PBDMA_ERROR, "Invalid or corrupted push buffer stream", RESTART_APP / CHECK_APP/CUDA.
    XidInfo(
        32,
        "ROBUST_CHANNEL_PBDMA_ERROR",
        "Invalid or corrupted push buffer stream",
        "RESTART_APP",
        "CHECK_APP/CUDA",
        "application",
        _APP + " or the PCIe link",
    ),
    # Catalog: ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT, "Driver firmware error", IGNORE / CONTACT_SUPPORT.
    XidInfo(
        38,
        "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT",
        "Driver firmware error",
        "IGNORE",
        "CONTACT_SUPPORT",
        "info",
        "NVIDIA's first action is none; if it repeats, report it to the provider",
    ),
    # Catalog: ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR, "GPU stopped processing", IGNORE / CONTACT_SUPPORT. The
    # process's channel was reset, usually after the process itself faulted or was killed.
    XidInfo(
        43,
        "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR",
        "GPU stopped processing (the process's channel was reset)",
        "IGNORE",
        "CONTACT_SUPPORT",
        "secondary",
        "it follows the process's own fault or its death: look at the error before it",
    ),
    # Catalog: ROBUST_CHANNEL_PREEMPTIVE_REMOVAL, "Preemptive cleanup, due to previous errors -- Most likely to see
    # when running multiple cuda applications and hitting a DBE", WORKFLOW_XID_45 / "Not Solo: IGNORE (follow other
    # Xid)". The log line names the Xid it follows ("caused by previous Xid 145").
    XidInfo(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup, due to previous errors",
        "WORKFLOW_XID_45",
        "IGNORE (follow other Xid)",
        "secondary",
        "it is the cleanup after another error or a killed process: follow the Xid it names or the one before it",
    ),
    # Catalog: ROBUST_CHANNEL_GPU_TIMEOUT_ERROR, "GPU stopped processing", RESET_GPU / CONTACT_SUPPORT.
    XidInfo(
        46,
        "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR",
        "GPU stopped processing",
        "RESET_GPU",
        "CONTACT_SUPPORT",
        "hardware",
        _DRAIN,
    ),
    # Catalog: ROBUST_CHANNEL_GPU_ECC_DBE, "Double Bit ECC Error", WORKFLOW_XID_48. Retirement: "XID 48: A DBE has
    # occurred." DCGM fails a GPU with any volatile DBE: "Drain the GPU and reset it or reboot the node."
    XidInfo(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double Bit ECC Error: uncorrectable GPU memory error",
        "WORKFLOW_XID_48",
        "WORKFLOW_XID_48",
        "hardware",
        _DRAIN,
    ),
    # Catalog: PMU_BREAKPOINT, "Unused" on Ampere and newer, CONTACT_SUPPORT; older GPUs report an internal
    # micro-controller breakpoint with it.
    XidInfo(
        61,
        "PMU_BREAKPOINT",
        "Internal micro-controller breakpoint/warning",
        "CONTACT_SUPPORT",
        "",
        "hardware",
        _DRAIN + "; report it to the provider",
    ),
    # Catalog: PMU_HALT_ERROR, "Internal micro-controller halt (newer drivers)", RESET_GPU / CONTACT_SUPPORT.
    XidInfo(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU", "CONTACT_SUPPORT", "hardware", _DRAIN),
    # Catalog: INFOROM_DRAM_RETIREMENT_EVENT, "GPU memory remapping event", IGNORE / IGNORE. Retirement: "A page has
    # successfully been retired" ("reload the driver to activate"; A100+: "reset gpu to activate").
    XidInfo(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "GPU memory row remapped / page retired (pending the next reset)",
        "IGNORE",
        "IGNORE",
        "info",
        "the memory repaired itself; the repair takes effect at the next GPU reset (NVML shows it pending)",
    ),
    # Catalog: INFOROM_DRAM_RETIREMENT_FAILURE, "GPU memory remapping failure", RESET_GPU / CONTACT_SUPPORT. Memory:
    # a row-remapping failure is an RMA condition.
    XidInfo(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "GPU memory remapping failure (an RMA condition)",
        "RESET_GPU",
        "CONTACT_SUPPORT",
        "hardware",
        _DRAIN + "; the GPU needs repair (RMA)",
    ),
    # Catalog: ROBUST_CHANNEL_NVDEC0_ERROR, "NVDEC0 Exception", RESTART_APP / CONTACT_SUPPORT.
    XidInfo(
        68,
        "ROBUST_CHANNEL_NVDEC0_ERROR",
        "NVDEC0 (video decoder) exception",
        "RESTART_APP",
        "CONTACT_SUPPORT",
        "application",
        _APP,
    ),
    # Catalog: ROBUST_CHANNEL_GR_CLASS_ERROR, "Graphics Engine class error", RESTART_APP / CHECK_APP/CUDA.
    XidInfo(
        69,
        "ROBUST_CHANNEL_GR_CLASS_ERROR",
        "Graphics Engine class error",
        "RESTART_APP",
        "CHECK_APP/CUDA",
        "application",
        _APP,
    ),
    # Catalog: NVLINK_ERROR, "NVLINK Error", WORKFLOW_NVLINK_ERR / CONTACT_SUPPORT.
    XidInfo(
        74,
        "NVLINK_ERROR",
        "NVLink error",
        "WORKFLOW_NVLINK_ERR",
        "CONTACT_SUPPORT",
        "hardware",
        _DRAIN + "; collectives over this link hang or fail until it is repaired",
    ),
    # Catalog: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS, "GPU has fallen off the bus", RESTART_BM / CONTACT_SUPPORT.
    # DCGM treats it as fatal.
    XidInfo(
        79,
        "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        "GPU has fallen off the bus",
        "RESTART_BM",
        "CONTACT_SUPPORT",
        "hardware",
        "the GPU is gone from the PCIe bus until the node is rebooted: drain this node (do not restart the run "
        "on it) and move the run to another",
    ),
    # Catalog: EXCESSIVE_SBE_INTERRUPTS, "High single-bit ECC error rate", IGNORE / CONTACT_SUPPORT.
    XidInfo(
        92,
        "EXCESSIVE_SBE_INTERRUPTS",
        "High single-bit ECC error rate",
        "IGNORE",
        "CONTACT_SUPPORT",
        "degraded",
        "the memory still corrects its errors, but at a rate that announces a failure: plan to move the run "
        "and report the GPU to the provider",
    ),
    # Catalog: ROBUST_CHANNEL_CONTAINED_ERROR, "Contained memory error", RESTART_APP / IGNORE (sympathetic). Memory:
    # the uncorrectable error was contained to the processes using that memory; the GPU keeps working.
    XidInfo(
        94,
        "ROBUST_CHANNEL_CONTAINED_ERROR",
        "Contained uncorrectable memory error: the processes using that memory were stopped",
        "RESTART_APP",
        "IGNORE (sympathetic)",
        "degraded",
        "restart the run (the GPU keeps working; the bad row is remapped at its next reset); if it repeats, "
        "move off this GPU",
    ),
    # Catalog: ROBUST_CHANNEL_UNCONTAINED_ERROR, "Uncontained memory error", RESET_GPU / IGNORE (sympathetic).
    XidInfo(
        95,
        "ROBUST_CHANNEL_UNCONTAINED_ERROR",
        "Uncontained uncorrectable memory error",
        "RESET_GPU",
        "IGNORE (sympathetic)",
        "hardware",
        _DRAIN,
    ),
    # Catalog: ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR, "Context Switch Timeout Error", RESET_GPU / CONTACT_SUPPORT.
    XidInfo(
        109,
        "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR",
        "Context switch timeout",
        "RESET_GPU",
        "CONTACT_SUPPORT",
        "hardware",
        _DRAIN,
    ),
    # Catalog: GSP_RPC_TIMEOUT, "GSP RPC Timeout", RESET_GPU / INVESTIGATE_SW. DCGM treats it as fatal.
    XidInfo(
        119,
        "GSP_RPC_TIMEOUT",
        "GSP (GPU System Processor) RPC timeout: the GPU's firmware stopped answering",
        "RESET_GPU",
        "INVESTIGATE_SW",
        "hardware",
        _DRAIN,
    ),
    # Catalog: GSP_ERROR, "GSP Error", RESET_GPU / INVESTIGATE_SW. DCGM treats it as fatal.
    XidInfo(120, "GSP_ERROR", "GSP (GPU System Processor) error", "RESET_GPU", "INVESTIGATE_SW", "hardware", _DRAIN),
    # Catalog: C2C_ERROR, "C2C Error", IGNORE / CONTACT_SUPPORT (the chip-to-chip link of Grace Hopper/Blackwell).
    XidInfo(
        121,
        "C2C_ERROR",
        "C2C (chip-to-chip link) error",
        "IGNORE",
        "CONTACT_SUPPORT",
        "degraded",
        "report it to the provider; if it repeats, move the run",
    ),
    # Catalog: UNRECOVERABLE_ECC_ERROR_ESCAPE, "ECC Unrecovered Error", RESET_GPU / CONTACT_SUPPORT.
    XidInfo(
        140,
        "UNRECOVERABLE_ECC_ERROR_ESCAPE",
        "Unrecovered ECC error",
        "RESET_GPU",
        "CONTACT_SUPPORT",
        "hardware",
        _DRAIN,
    ),
    # Catalog: GPU_INIT_ERROR, "GPU Initialization Error", RESET_GPU / CONTACT_SUPPORT.
    XidInfo(143, "GPU_INIT_ERROR", "GPU initialization error", "RESET_GPU", "CONTACT_SUPPORT", "hardware", _DRAIN),
    # Catalog: NVLINK_SAW_ERROR .. NVLINK_NETIR_ERROR (144-150), "NVLINK: ... Error", WORKFLOW_NVLINK5_ERR. The line
    # says "Fatal" or "Nonfatal" (gpud's RegexNVRMXidExtended).
    XidInfo(
        144, "NVLINK_SAW_ERROR", "NVLink SAW error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "hardware", _DRAIN
    ),
    XidInfo(
        145, "NVLINK_RLW_ERROR", "NVLink RLW error", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR", "hardware", _DRAIN
    ),
    XidInfo(
        149,
        "NVLINK_NETIR_ERROR",
        "NVLink NETIR error",
        "WORKFLOW_NVLINK5_ERR",
        "WORKFLOW_NVLINK5_ERR",
        "hardware",
        _DRAIN,
    ),
    # Catalog: GPU_RECOVERY_ACTION_CHANGED, "GPU Recovery Action Changed", XID_154 / "N/A Informational only regarding
    # another Xid". The line names the action: "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)"
    # (gpud's kmsg tests); Memory: None, GPU Reset, Node Reboot, Drain P2P, Drain and Reset. Judged by that action.
    XidInfo(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU recovery action changed",
        "XID_154",
        "N/A Informational only regarding another Xid",
        "info",
        "the driver states what the GPU needs now (see the action in the line)",
    ),
    # Catalog: NVLINK_SW_DEFINED_ERROR, RESET_GPU / INVESTIGATE_SW_USER; RESOURCE_RETIREMENT_EVENT, RESET_GPU / IGNORE.
    XidInfo(
        155,
        "NVLINK_SW_DEFINED_ERROR",
        "NVLink software-defined error",
        "RESET_GPU",
        "INVESTIGATE_SW_USER",
        "hardware",
        _DRAIN,
    ),
    XidInfo(156, "RESOURCE_RETIREMENT_EVENT", "Resource retirement event", "RESET_GPU", "IGNORE", "hardware", _DRAIN),
)

CATALOG: dict[int, XidInfo] = {x.code: x for x in _CATALOG}

# Xid 154's recovery actions (NVML nvmlDeviceGetGpuRecoveryAction / the kernel line's words): which need a person.
RECOVERY_NONE = ("none",)


def describe(code: int) -> XidInfo:
    """The catalog's entry, or a stand-in for an Xid rlwatch does not know (judged a warning: look it up)."""
    known = CATALOG.get(code)
    if known is not None:
        return known
    return XidInfo(
        code,
        "UNKNOWN",
        f"Xid {code}",
        "?",
        "?",
        "unknown",
        "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
    )


def recovery_action(text: str) -> str | None:
    """Xid 154's new recovery action, in the driver's words: "... changed from 0x0 (None) to 0x4 (Drain and
    Reset)" → "Drain and Reset"; None when the line does not say."""
    marker = text.rfind(" to 0x")
    if marker < 0:
        return None
    rest = text[marker:]
    open_, close = rest.find("("), rest.find(")")
    if open_ < 0 or close <= open_:
        return None
    return rest[open_ + 1 : close].strip() or None


def verdict_of(code: int, text: str = "") -> str:
    """The verdict for one Xid line: the catalog's, except Xid 154 (by the action it names) and the NVLink5 Xids
    (a "Nonfatal" one only degrades)."""
    info = describe(code)
    if code == 154:
        action = (recovery_action(text) or "").lower()
        return "info" if action in ("", *RECOVERY_NONE) else "hardware"
    if 144 <= code <= 150 and " Nonfatal " in f" {text} ":
        return "degraded"
    return info.verdict
