"""The findings banner keeps each remedy whole: the newcomer's 80x24 examples, each finding as the demo (or their own
hung run) produced it, and the NaN loss at 120x40 whose remedy is in its words.

At 80 columns the one-line banner left `→ $ rlwatch service ins… +1`, `→ a higher memory limit… +2` and headlines of
two words (`The run died of sha… → a bigger /dev/shm (--shm-size)`); at 120x40 the NaN finding was cut before
"resume from the last checkpoint … at step 10"."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from textual.widgets import Static

from rlwatch.common.state import (
    CheckpointInfo,
    CheckpointState,
    Finding,
    LearningState,
    MetricPoint,
    RunState,
    Severity,
    Snapshot,
)
from rlwatch.engine.diagnosis import Context
from rlwatch.engine.diagnosis.learning import learning
from rlwatch.widgets.findings import compact_text, headline_first
from tests import snapshot_data as data
from tests.tui.test_tui_pilot import RecordingFeed, make_app, text_of

CRIT, WARN, INFO = Severity.CRITICAL, Severity.WARNING, Severity.INFO

WATCHDOG_RUN = "/tmp/rlwatch-demo-memory-leak-0ppawjap/run"
# memory-leak after `w`: the watchdog finding leads, its command holds the run directory.
AFTER_W = (
    Finding(
        CRIT,
        "expected_missing",
        "The expected watchdog is not running: nothing will restart leaking or crashed processes.",
        None,
        command="rlwatch service install",
    ),
    Finding(
        WARN,
        "brake_fired",
        "Emergency brake fired 24 times (96.0/min): its last line saw 1.8 GB free at 20:33:35 (its brake threshold "
        "is 2.0 GB).",
        None,
    ),
)
KERNEL_OOM = (
    Finding(
        CRIT,
        "kernel_oom_kill",
        "Rank 1 (pid 9724) was killed by the kernel OOM killer at 21:56:57, RSS 62.8 GB: its memory cgroup "
        "/kubepods/burstable/pod5d8e1f0a-sim/ddp hit its limit; the run's logs stopped at 21:56:57. The root cause is "
        "memory, not the code: raise the pod's or container's memory limit, or make the run hold less; then start "
        "the run again (no checkpoint to resume from was found).",
        None,
        fix="a higher memory limit, or a run that holds less",
    ),
    Finding(
        CRIT,
        "torchrun_failed",
        "torchrun's root cause (first observed failure): rank 1 (exit code -9, SIGKILL, host vm); what it printed "
        "before is not in the logs read. Stopped after it: rank 0 (exit code -15, SIGTERM, host vm). "
        "(torchrun.log:15)",
        None,
    ),
    Finding(WARN, "crashed", "Last exception: RuntimeError: rank 1 lost (torchrun.log:14).", None),
)
SHM_SMALL = (
    Finding(
        CRIT,
        "shm_exhausted",
        "The run died of shared memory: 2 shared-memory error(s) in its logs, last 21:57:01 (trainer.log:103, after "
        "step 7) — 'RuntimeError: DataLoader worker (pid 5010) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to rais'. /dev/shm is 67.1 MB (67.1 MB free).",
        None,
        fix="a bigger /dev/shm (--shm-size)",
    ),
    Finding(
        WARN,
        "crashed",
        "Last exception: RuntimeError: DataLoader worker (pid 5010) is killed by signal: Bus error. at "
        "signal_handling.py:73 (trainer.log:84, 21:57:01 (after step 7)).",
        None,
    ),
)
GPU_XID = (
    Finding(
        CRIT,
        "xid_79",
        "Xid 79 on GPU 0 (PCI 0000:3b:00) at 21:57:05: GPU has fallen off the bus (NVIDIA: RESTART_BM). It hit pid "
        "5407 (python3); the run's last step was logged at 21:57:05. A hardware fault, not the code: the GPU is gone "
        "from the PCIe bus until the node is rebooted: drain this node (do not restart the run on it).",
        None,
        fix="drain the node, resume elsewhere",
    ),
    Finding(
        CRIT,
        "gpu_lost",
        "GPU 0 (00000000:3B:00.0) is lost: NVML says 'GPU is lost' — it fell off the bus or stopped answering.",
        None,
        fix="drain the node, resume elsewhere",
    ),
    Finding(
        WARN,
        "crashed",
        "Last exception: RuntimeError: CUDA error: unspecified launch failure at _tensor.py:648 (trainer.log:105).",
        None,
    ),
)
OWN_HANG = (
    Finding(
        CRIT,
        "hung",
        "The run is hung: no progress since 20:41:10 (1m01s; its cadence allows 1m00s) while its processes are "
        "alive (pid 13460); its last line: train.log:212: epoch 1 batch 4/20 loss 0.512. Where it waits: "
        "trainer-0 (pid 13460) in <module> (train.py:13).",
        None,
        command="py-spy dump --pid 13460",
    ),
    Finding(INFO, "no_checkpoint", "No checkpoint was found under the run directory.", None),
)
NAN_LOSS = (
    Finding(
        CRIT,
        "learning_nonfinite",
        "Loss has been NaN for the last 13 logged steps, since step 12: the run finished without learning from then "
        "on. Resume from the last checkpoint before it, at step 10; try a lower learning rate, bf16 instead of fp16, "
        "or gradient clipping.",
        None,
    ),
    Finding(
        CRIT,
        "learning_nonfinite",
        "Grad norm has been NaN for the last 13 logged steps, since step 12: the run finished without learning from "
        "then on. Resume from the last checkpoint before it, at step 10; try a lower learning rate, bf16 instead of "
        "fp16, or gradient clipping.",
        None,
    ),
    Finding(INFO, "run_finished", "The run finished: training finished at step 24 of 24.", None),
)

# (findings, run directory, the remedy as the banner must show it whole, the headline's first words)
EXAMPLES = {
    "memory-leak after w": (
        AFTER_W,
        WATCHDOG_RUN,
        f"$ rlwatch service install {WATCHDOG_RUN}",
        "The expected watchdog",
    ),
    "kernel-oom": (KERNEL_OOM, None, "→ a higher memory limit, or a run that holds less", "Rank 1 (pid 9724) was"),
    "shm-small": (SHM_SMALL, None, "→ a bigger /dev/shm (--shm-size)", "The run died of shared memory"),
    "gpu-xid": (GPU_XID, None, "→ drain the node, resume elsewhere", "Xid 79 on GPU 0 (PCI 0000:3b:00)"),
    "own hung run": (OWN_HANG, None, "→ $ py-spy dump --pid 13460", "The run is hung: no progress"),
}


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    with data.utc_timezone():
        yield


def with_findings(findings: tuple[Finding, ...], run_dir: str | None) -> Snapshot:
    base = data.SCENARIOS["healthy"][0]()
    return dataclasses.replace(base, findings=findings, run_dir=run_dir or base.run_dir, sources=())


@pytest.mark.parametrize("name", list(EXAMPLES))
async def test_at_80x24_the_banner_keeps_the_remedy_whole_and_the_headline_readable(name: str) -> None:
    findings, run_dir, remedy, headline = EXAMPLES[name]
    feed = RecordingFeed(with_findings(findings, run_dir))
    app = make_app(feed)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause()
        banner = app.main.query_one("#findings", Static)
        lines = text_of(banner).split("\n")
        assert banner.region.height == len(lines) <= 2
        assert all(len(line) <= 77 for line in lines)  # within the banner's border and padding
        said = " ".join(lines)
        assert remedy in said, said
        assert f"+{len(findings) - 1} more (d)" in said, said
        assert headline in said, said  # more than two words of it


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_over_a_maximised_panel_one_line_still_keeps_the_remedy_whole(name: str) -> None:
    findings, run_dir, remedy, _headline = EXAMPLES[name]
    line = compact_text(findings, (), 77, run_dir=run_dir).plain
    assert "\n" not in line and len(line) <= 77
    assert remedy in line, line
    assert f"+{len(findings) - 1}" in line


async def test_m_over_80x24_keeps_the_banner_to_one_line_with_the_remedy() -> None:
    app = make_app(RecordingFeed(with_findings(SHM_SMALL, None)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6", "m")
        await pilot.pause()
        await pilot.pause()
        banner = app.main.query_one("#findings", Static)
        assert banner.region.height == 1
        assert "→ a bigger /dev/shm (--shm-size)" in text_of(banner)


async def test_at_120x40_the_nan_loss_headline_is_read_whole_with_its_remedy_in_words() -> None:
    app = make_app(RecordingFeed(with_findings(NAN_LOSS, None)))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.pause()
        banner = app.main.query_one("#findings", Static)
        said = text_of(banner)
        assert banner.region.height <= 5
        assert "Resume from the last checkpoint before it, at step 10" in said.replace("\n", " ")
        assert "Grad norm has been NaN" in said  # the next finding, on a line of its own


def test_a_remedy_wider_than_the_line_is_cut_only_at_its_end() -> None:
    f = Finding(CRIT, "x", "something failed", None, command="rlwatch act rearm --target " + "t" * 120)
    line = compact_text((f,), (), 77).plain
    assert len(line) <= 77 and line.startswith("● $ rlwatch act rearm --target ttt") and line.endswith("…")


def test_headline_first_gives_the_headline_its_share_and_every_other_finding_a_line() -> None:
    out = headline_first(KERNEL_OOM, (), 117, 5).plain.split("\n")
    assert len(out) <= 5
    assert "→ a higher memory limit, or a run that holds less" in out[-3] or any(
        "→ a higher memory limit" in line for line in out[:-2]
    )
    assert out[-2].startswith("● CRITICAL torchrun's root cause") and out[-1].startswith("● WARNING Last exception")


def _nan_loss_findings() -> tuple[Finding, ...]:
    """The nan-loss demo's findings as the learning rule makes them: NaN from step 12 to 24, checkpoints at 10 and 20."""
    nan = float("nan")
    loss = tuple(MetricPoint(i, 1.0 / i if i < 12 else nan, float("nan")) for i in range(1, 25))
    ck = CheckpointState(CheckpointInfo("/run/ckpt/step_20", 20, None, None, None, None), 2, (10, 20))
    s = dataclasses.replace(
        data.SCENARIOS["healthy"][0](),
        learning=LearningState(series={"loss": loss}),
        checkpoint=ck,
        run_state=RunState("finished", "training finished at step 24 of 24", None),
    )
    return tuple(learning(s, Context()))


def test_the_nan_finding_carries_the_resume_step_in_its_fix_words() -> None:
    (nan,) = _nan_loss_findings()
    assert nan.severity is CRIT and nan.fix == "resume from step 10"


async def test_at_80x24_the_nan_banner_keeps_resume_from_step_10_whole() -> None:
    findings = (*_nan_loss_findings(), NAN_LOSS[1], NAN_LOSS[2])
    app = make_app(RecordingFeed(with_findings(findings, None)))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.pause()
        banner = app.main.query_one("#findings", Static)
        lines = text_of(banner).split("\n")
        assert banner.region.height == len(lines) <= 2 and all(len(line) <= 77 for line in lines)
        said = " ".join(lines)
        assert "→ resume from step 10" in said, said
        assert "Loss has been NaN" in said, said
