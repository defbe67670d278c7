"""rlwatch judged on real frameworks' output (tests/real/, made on a GPU host: see its README for commands and versions).

Each case is copied to a temporary directory with its files' modification time set to the capture's end, then judged
by the real ``rlwatch report --json`` in another process, read some hours later. What must hold is what a person on
that host would have found true: a finished colocated TRL run is healthy and expects no server; a CUDA OOM is named;
torchrun's root cause is the rank it names, not the victim; one NCCL timeout is one, however often torch prints it;
no time is later than the files were last written; and no kill is planned where no process is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

REAL = Path(__file__).parent / "real"
CAPTURED = datetime.fromisoformat("2026-11-24T06:52:30+00:00").timestamp()  # after every case's last write
RELAUNCHED = datetime.fromisoformat("2026-11-24T22:01:38+00:00").timestamp()  # torchrun-relaunched, captured later


def _copy(case: str, dest: Path, captured: float = CAPTURED) -> Path:
    run = dest / case
    shutil.copytree(REAL / case, run)
    for root, dirs, files in os.walk(run):
        for name in files + dirs:
            os.utime(os.path.join(root, name), (captured, captured))
    os.utime(run, (captured, captured))
    return run


def _rlwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlwatch", *args], capture_output=True, text=True, timeout=90, check=False
    )


def _report(run: Path) -> dict[str, Any]:
    done = _rlwatch("report", "--json", str(run))
    assert done.stdout, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _times(value: Any) -> list[float]:
    """Every ISO time anywhere in the report's events, incidents and timeline."""
    out: list[float] = []
    if isinstance(value, dict):
        for item in value.values():
            out += _times(item)
    elif isinstance(value, list):
        for item in value:
            out += _times(item)
    elif isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == "T":
        try:
            out.append(datetime.fromisoformat(value).timestamp())
        except ValueError:
            pass
    return out


def test_a_finished_colocated_trl_grpo_run_is_healthy_and_expects_no_server(tmp_path: Path) -> None:
    report = _report(_copy("trl-grpo-colocated", tmp_path))
    assert report["profile"] == "trl"
    assert report["server"]["expected"] is False
    assert [f for f in report["findings"] if f["severity"] in ("critical", "warning")] == []
    assert report["training"]["last_step"] == 30 and report["training"]["finished"] is True
    assert report["checkpoint"]["latest"]["global_step"] == 30
    assert report["checkpoint"]["count"] == 6


def test_a_cuda_oom_is_named_with_what_it_tried_to_allocate(tmp_path: Path) -> None:
    report = _report(_copy("cuda-oom", tmp_path))
    assert "cuda_oom" in {f["code"] for f in report["findings"] if f["severity"] == "critical"}
    titles = [i["title"] for i in report["incidents"] if i["kind"] == "traceback"]
    assert titles and titles[-1].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB")
    assert report["server"]["expected"] is False


def test_torchruns_root_cause_is_the_rank_it_names_and_the_victim_is_listed_apart(tmp_path: Path) -> None:
    report = _report(_copy("torchrun-exception", tmp_path))
    failures = [i for i in report["incidents"] if i.get("root_cause")]
    assert len(failures) == 1
    root, victims = failures[0]["root_cause"], failures[0]["victims"]
    assert (root["rank"], root["exitcode"], root["host"]) == (1, 1, "localhost")
    assert root["error"] == "ValueError: reward model returned NaN for batch 3"
    assert [(v["rank"], v["signal"]) for v in victims] == [(0, "SIGTERM")]
    assert failures[0]["cause"]["title"] == "ValueError: reward model returned NaN for batch 3"
    worst = next(f for f in report["findings"] if f["severity"] == "critical")
    assert "rank 1" in worst["message"] and "ValueError" in worst["message"]


def test_a_torchrun_failure_the_relaunch_got_past_is_history_and_before_it_the_root_cause(tmp_path: Path) -> None:
    """A transformers Trainer under torchrun failed at step 3; the same command, run again into the same log, trained
    to the end. The report's root cause is then told as history; the log cut where the relaunch began shows it as
    what is wrong now."""

    def torchrun_finding(report: dict[str, Any]) -> dict[str, Any]:
        return next(f for f in report["findings"] if f["message"].startswith("torchrun's root cause"))

    run = _copy("torchrun-relaunched", tmp_path, RELAUNCHED)
    after = _report(run)
    told = torchrun_finding(after)
    assert told["severity"] == "info" and told["message"].endswith("the run has progressed since.")
    assert "RuntimeError: reward model returned NaN for batch 3" in told["message"]
    assert after["training"]["last_step"] == 8

    log = run / "train.log"
    lines = log.read_bytes().splitlines(keepends=True)
    report_at = next(i for i, line in enumerate(lines) if b"ChildFailedError: " in line)
    relaunch = next(i for i in range(report_at, len(lines)) if lines[i].startswith(b"{'loss'"))
    log.write_bytes(b"".join(lines[:relaunch]))
    os.utime(log, (RELAUNCHED, RELAUNCHED))
    now = torchrun_finding(_report(run))
    assert now["severity"] == "critical" and "progressed since" not in now["message"]


NCCL_CASES = [
    "torchrun-nccl-timeout-2gpu",
    "torchrun-nccl-timeout-2gpu-async1",
    "torchrun-nccl-timeout",
    "torchrun-nccl-timeout-default",
]


@pytest.mark.parametrize("case", ["torchrun-nccl-timeout-2gpu", "torchrun-nccl-timeout-2gpu-async1"])
def test_after_an_nccl_timeout_between_two_gpus_the_root_cause_is_the_rank_that_timed_out(
    tmp_path: Path, case: str
) -> None:
    """Rank 1 stopped joining; rank 0's watchdog timed out the all-reduce and aborted it (SIGABRT); torchrun stopped
    rank 1 (SIGTERM). The root cause is rank 0 and the timeout that preceded it, not the victim's signal."""
    report = _report(_copy(case, tmp_path))
    failures = [i for i in report["incidents"] if i.get("root_cause")]
    assert len(failures) == 1
    root = failures[0]["root_cause"]
    assert (root["rank"], root["exitcode"], root["signal"]) == (0, -6, "SIGABRT")
    assert [(v["rank"], v["signal"]) for v in failures[0]["victims"]] == [(1, "SIGTERM")]
    cause = failures[0]["cause"]
    assert cause["kind"] == "nccl_timeout"
    assert cause["collective"] == {
        "rank": 0,
        "seq": 4,
        "op": "ALLREDUCE",
        "timeout_ms": 10000,
        "ran_ms": cause["collective"]["ran_ms"],
        "group": cause["collective"]["group"],
    }
    assert cause["collective"]["ran_ms"] >= 10000
    first = report["findings"][0]
    assert first["code"] == "torchrun_failed" and first["severity"] == "critical"
    assert "rank 0 (exit code -6, SIGABRT" in first["message"] and "ALLREDUCE SeqNum=4" in first["message"]
    assert "child_failed" not in {f["code"] for f in report["findings"]}  # said once, by the report read whole


@pytest.mark.parametrize("case", NCCL_CASES)
def test_one_nccl_timeout_printed_on_several_lines_is_one(tmp_path: Path, case: str) -> None:
    run = _copy(case, tmp_path)
    printed = (run / "torchrun.log").read_text().count("SeqNum=4")
    report = _report(run)
    timeouts = [i for i in report["incidents"] if i["kind"] == "nccl_timeout"]
    assert len(timeouts) == 1
    assert timeouts[0]["collective"]["op"] == "ALLREDUCE" and timeouts[0]["collective"]["seq"] == 4
    assert timeouts[0]["collective"]["rank"] == 0
    assert printed >= 1
    nccl = [f for f in report["findings"] if f["code"] == "nccl_timeout"]
    assert nccl and "1 NCCL collective timeout" in nccl[0]["message"]


@pytest.mark.parametrize("case", ["trl-grpo-colocated", "cuda-oom", "torchrun-exception", *NCCL_CASES])
def test_no_time_is_later_than_the_files_were_written(tmp_path: Path, case: str) -> None:
    report = _report(_copy(case, tmp_path))
    read_at = datetime.fromisoformat(report["time"]).timestamp()
    assert read_at > CAPTURED + 30  # read after: a line given its read time would show
    for section in ("events", "incidents", "timeline"):
        late = [t for t in _times(report[section]) if t > CAPTURED + 1]
        assert late == [], f"{section} has times after the files' last write"


@pytest.mark.parametrize("case", ["trl-grpo-colocated", "torchrun-exception", "cuda-oom", "torchrun-relaunched"])
def test_no_kill_is_planned_where_no_process_runs(tmp_path: Path, case: str) -> None:
    done = _rlwatch("act", "kill-zombies", "--dry-run", str(_copy(case, tmp_path)))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "refused" in done.stdout
    assert "SIGTERM" not in done.stdout and "SIGKILL" not in done.stdout


def test_an_offline_vllm_engine_stopping_after_the_last_step_is_no_crash(tmp_path: Path) -> None:
    """vLLM's offline engine (TRL's colocated generation with use_vllm) prints that its engine core died as the
    interpreter exits at the end of a healthy run (vllm-project/vllm#32468). Appended after the real run's last step,
    it is said, not raised as a crash."""
    run = _copy("trl-grpo-colocated", tmp_path)
    with (run / "run" / "train.log").open("a") as log:
        log.write(
            "ERROR 11-24 06:34:31 [core_client.py:597] Engine core proc EngineCore_DP0 died unexpectedly, "
            "shutting down client.\n"
        )
    os.utime(run / "run" / "train.log", (CAPTURED, CAPTURED))
    report = _report(run)
    assert [f for f in report["findings"] if f["severity"] in ("critical", "warning")] == []
    said = [f for f in report["findings"] if f["code"] == "engine_dead"]
    assert said and said[0]["severity"] == "info" and "had finished" in said[0]["message"]
