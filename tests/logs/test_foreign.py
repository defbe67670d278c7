"""Each foreign message is parsed in one place (rlwatch/logs/foreign/, logs/ray.py, logs/torchrun_report.py): the
verbatim lines of tests/real/ read by it, and every reader (the kernel log source, a log's ending, the catalogue of
kinds) giving one answer for one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlwatch.logs import ray, torchrun_report
from rlwatch.logs.foreign import kernel, slurm
from rlwatch.logs.kinds import builtin_kinds
from rlwatch.logs.shapes import EXIT, KERNEL, SIGNAL, shape_of
from rlwatch.sources.kernel import LineParser, split_kernel_prefix

REAL = Path(__file__).resolve().parents[1] / "real"
KERNEL_LOGS = REAL / "host" / "kernel"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def _messages() -> list[str]:
    """Each kernel message of the saved real kernel logs, its time prefix taken off."""
    return [split_kernel_prefix(line)[1].strip() for path in sorted(KERNEL_LOGS.glob("*.log")) for line in _lines(path)]


def _kind(name: str) -> object:
    return next(k for k in builtin_kinds() if k.name == name)


def test_every_oom_kill_of_the_real_kernel_logs_is_one_answer_for_every_reader() -> None:
    kills = [(m, kernel.oom_kill(m)) for m in _messages() if "Killed process" in m]
    assert len(kills) == 8
    oom_kind = _kind("oom_kill")
    for message, kill in kills:
        assert kill is not None, message
        events = LineParser("test", lambda s: None).feed(message)
        assert [(e.kind, e.pid, e.process) for e in events] == [("oom_kill", kill.pid, kill.process)]
        shape = shape_of(message)
        assert shape is not None and (shape.kind, shape.pid) == (KERNEL, kill.pid), message
        assert shape.detail == f"oom_kill {kill.process}"
        assert oom_kind.regex.search(message) is not None  # type: ignore[attr-defined]
    # the kernel before 4.19 printed the kill with no "Out of memory:" before it: still a kill, and a log's ending
    old = next(k for m, k in kills if m.startswith("Killed process 28438"))
    assert old is not None and (old.process, old.rss_bytes, old.cgroup) == ("java", (466160 + 13684) * 1024, False)
    memcg = next(k for m, k in kills if m.startswith("Memory cgroup"))
    assert memcg is not None and memcg.cgroup and memcg.process == "uwsgi"
    odd = next(k for m, k in kills if "((resolved))" in m)
    assert odd is not None and odd.process == "(resolved)"  # a name with brackets in it is read whole


def test_the_pids_each_real_oom_kill_line_names() -> None:
    """Whether the OOM killer took a given process (a Ray worker that died with SYSTEM_ERROR) is asked of every line
    the oom_kill kind counted: each real kill line names its one pid, also cut off after it as a program's log may
    quote it, and never a pid that only begins with the same digits."""
    kills = [(m, kernel.oom_kill(m)) for m in _messages() if "Killed process" in m]
    for message, kill in kills:
        assert kill is not None
        assert kernel.killed_pids(message) == (kill.pid,), message
        cut = message[: message.index(str(kill.pid)) + len(str(kill.pid))]
        assert kernel.killed_pids(f"worker log: {cut}") == (kill.pid,)
    assert kernel.killed_pids("Out of memory: Killed process 6984051 (python)") == (6984051,)
    assert 698405 not in kernel.killed_pids("Out of memory: Killed process 6984051 (python)")
    assert kernel.killed_pids("oom-kill:constraint=CONSTRAINT_NONE,task=python,pid=698405,uid=1000") == ()


def test_the_oom_summary_of_the_real_kernel_logs_even_wrapped_by_a_terminal() -> None:
    summaries = [kernel.oom_summary(m) for m in _messages() if "oom-kill:" in m]
    assert [(s.pid, s.task, s.memcg) for s in summaries if s is not None] == [
        (698405, "python", None),
        (25315, "python3", None),
    ]


def test_every_xid_line_is_an_event_and_a_log_ending_whatever_the_driver_prints() -> None:
    xids = [(m, kernel.xid_report(m)) for m in _messages() if "NVRM: Xid" in m]
    assert len(xids) == 13
    # an older driver prints no "PCI:" (the one parser once wanted it: an event, but no log's ending)
    older = "NVRM: Xid (0000:03:00): 14, Channel 00000001"
    xids.append((older, kernel.xid_report(older)))
    for message, xid in xids:
        assert xid is not None, message
        (event,) = LineParser("test", lambda s: None).feed(message)
        assert (event.kind, event.xid, event.pid, event.process) == ("xid", xid.xid, xid.pid, xid.process)
        shape = shape_of(message)
        assert shape is not None and (shape.kind, shape.detail) == (KERNEL, f"xid {xid.xid}"), message
    first = xids[0][1]
    assert first is not None and (first.xid, first.pci, first.pid, first.process) == (13, "0000:cb:00", None, None)


def test_a_gpu_fallen_off_the_bus_in_the_real_logs() -> None:
    messages = _messages()
    assert [kernel.bus_lost(m) for m in messages if kernel.bus_lost(m)] == ["0000:2b:00.0"]
    assert [kernel.bus_lost_head(m) for m in messages if kernel.bus_lost_head(m)] == ["0000:b3:00.0"]
    tails = [m for m in messages if kernel.says_bus_lost(m)]
    assert len(tails) == 2  # the one-line shape and the three-line message's tail
    assert all(s is not None and s.detail == "fallen off the bus" for s in map(shape_of, tails))
    assert kernel.says_bus_lost("NVRM: GPU at PCI:0000:02:00: GPU-660d987e-5b28-3bf6-2a2d-1d5ecae7f6df") is False


def test_faults_the_kernel_saw_a_process_die_of() -> None:
    # the lines tests/sources/test_kernel.py quotes from real reports (a segfault in libnccl, a GPF, a fatal SIGBUS)
    seg = kernel.process_fault(
        "python3[3720]: segfault at 2993 ip 00007f2d98068af0 sp 00007fffaa6987e8 error 4 in "
        "libnccl.so.2[7f2d98046000+42000] likely on CPU 3 (core 3, socket 0)"
    )
    gpf = kernel.process_fault(
        "pan[8423] general protection ip:7fd565c807b0 sp:7fff714c4ce8 error:0 in libc-2.8.90.so[7fd565bfe000+169000]"
    )
    bus = kernel.process_fault("/usr/bin/python3.11: python3: potentially unexpected fatal signal 7.")
    assert seg == kernel.ProcessFault("segfault", "python3", 3720)
    assert gpf == kernel.ProcessFault("gpf", "pan", 8423)
    assert bus == kernel.ProcessFault("sigbus", "python3", None)
    assert kernel.process_fault("oom_reaper: reaped process 15784 (python3), now anon-rss:0kB") is None


@pytest.mark.parametrize(
    ("path", "kind", "cancelled", "oom", "node"),
    [
        ("slurm-494583.out", "slurm_cancelled", "time limit", False, False),
        ("slurm-37205392.out", "oom_kill", None, True, False),
        ("error_191.err", "oom_kill", None, True, False),
        ("salloc-node-failure.out", "node_failure", None, False, True),
    ],
)
def test_slurms_records_of_how_a_job_ended(path: str, kind: str, cancelled: str | None, oom: bool, node: bool) -> None:
    lines = [line for line in _lines(REAL / "fresh" / path) if "error:" in line]
    assert lines
    regex = _kind(kind).regex  # type: ignore[attr-defined]
    for line in lines:
        assert regex.search(line) is not None, line
        assert slurm.cancelled(line) == cancelled
        assert slurm.oom_kill_reported(line) is oom
        assert slurm.node_failed(line) is node
        shape = shape_of(line)
        assert shape is not None
        if cancelled:
            assert (shape.kind, shape.signal, shape.detail) == (SIGNAL, "SIGTERM", "slurm time limit")
        elif oom:
            assert (shape.kind, shape.detail) == (KERNEL, "slurm oom_kill")
        else:
            assert (shape.kind, shape.detail) == (EXIT, "slurm node failure")


def test_a_node_failure_cancellation_is_no_slurm_cancelled_kind_but_the_node_failure() -> None:
    line = "*** JOB 1 ON n1 CANCELLED AT 2024-04-20T09:09:37 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"
    assert slurm.cancelled(line) == "node failure"
    assert _kind("slurm_cancelled").regex.search(line) is None  # type: ignore[attr-defined]
    assert _kind("node_failure").regex.search(line) is not None  # type: ignore[attr-defined]


def test_torchruns_exit_and_signal_lines_as_the_report_and_a_log_ending_read_them() -> None:
    lines = _lines(REAL / "torchrun-nccl-timeout-2gpu-async1" / "torchrun.log")
    agent = next(line for line in lines if "failed (exitcode:" in line)
    assert torchrun_report.exit_reported(agent) == (-6, 750)
    field = next(line for line in lines if line.strip().startswith("exitcode") and "(pid: 751)" in line)
    assert torchrun_report.exit_reported(field) == (-15, 751)
    signal_line = next(line for line in lines if "received by PID 750" in line)
    assert torchrun_report.signal_received(signal_line) == (6, "SIGABRT", 750)
    shape = shape_of(signal_line)
    assert shape is not None and (shape.kind, shape.code, shape.signal, shape.pid) == (SIGNAL, -6, "SIGABRT", 750)
    relaunched = next(
        line for line in _lines(REAL / "torchrun-relaunched" / "train.log") if "failed (exitcode:" in line
    )
    assert torchrun_report.exit_reported(relaunched) == (1, 554)
    assert torchrun_report.signal_received("  traceback : Signal 6 (SIGABRT)") is None


def test_rays_worker_exit_type_as_the_ray_reader_and_a_log_ending_read_it() -> None:
    line = next(
        line
        for line in _lines(REAL / "ray" / "state-api-http" / "no-auth" / "driver.log")
        if "Worker exit type" in line
    )
    m = ray.EXIT_TYPE.search(line)
    assert m is not None and m.group(1) == "SYSTEM_ERROR"
    shape = shape_of(line)
    assert shape is not None and (shape.kind, shape.detail) == (EXIT, "SYSTEM_ERROR")
