"""The kernel log source: parsers over every shape the kernel and the driver print, /dev/kmsg and its fallbacks as real
files and real processes, saved logs read as regular files only, boot-relative times turned into wall time."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlwatch.common.clock import FakeClock
from rlwatch.common.state import GpuHealth, GpuState, KernelLogState
from rlwatch.sources.kernel import (
    CommandReader,
    KernelLog,
    KmsgReader,
    LineParser,
    LiveUnavailable,
    normalize_pci,
    split_kernel_prefix,
    with_gpus,
)

BOOT = 1_763_000_000.0


def parse(*lines: str) -> list:  # type: ignore[type-arg]
    p = LineParser("test", lambda since: BOOT + since)
    out = []
    for line in lines:
        out.extend(p.feed(line))
    return out


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    """A real program standing in for journalctl or dmesg: argv to run it."""
    path = tmp_path / name
    path.write_text(f"import sys, time\n{body}\n", encoding="utf-8")
    return [sys.executable, str(path)]


# ---------------------------------------------------------------------------------------------------------- parsing
def test_the_oom_killer_line_of_every_kernel_since_4_19_with_its_summary() -> None:
    (e,) = parse(
        "[2059991.491436] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=pod,mems_allowed=0,"
        "oom_memcg=/kubepods/burstable/pod1,task_memcg=/kubepods/burstable/pod1/c,task=python3,pid=812917,uid=0",
        "[2059991.491542] Memory cgroup out of memory: Killed process 812917 (python3) total-vm:70312244kB, "
        "anon-rss:61451456kB, file-rss:74816kB, shmem-rss:12296kB, UID:0 pgtables:69068kB oom_score_adj:0",
    )
    assert (e.kind, e.pid, e.process) == ("oom_kill", 812917, "python3")
    assert e.rss_bytes == (61451456 + 74816 + 12296) * 1024
    assert e.memcg == "/kubepods/burstable/pod1"  # from the summary printed just before
    assert e.time == BOOT + 2059991.491542


def test_older_oom_lines_and_near_misses() -> None:
    (old,) = parse(
        "[Thu Dec  7 00:05:15 2017] Killed process 28438 (java) total-vm:20255636kB, anon-rss:466160kB, file-rss:13684kB"
    )
    assert old.rss_bytes == (466160 + 13684) * 1024 and old.memcg is None
    assert old.time == time.mktime((2017, 12, 7, 0, 5, 15, 0, 0, -1))
    assert (
        parse(
            "[Thu Dec  7 00:05:15 2017] Memory cgroup out of memory: Kill process 24572 (java) score 0 or sacrifice child"
        )
        == []
    )
    assert parse("[  518.053407] oom_reaper: reaped process 15784 (python3), now anon-rss:0kB, file-rss:0kB") == []
    (odd,) = parse("[ 518.0] Out of memory: Killed process 15925 ((resolved)) total-vm:1kB, anon-rss:2kB, file-rss:3kB")
    assert odd.process == "(resolved)" and odd.rss_bytes == 5 * 1024


@pytest.mark.parametrize(
    ("line", "xid", "pci", "pid", "name"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=812917, name=python3, GPU has fallen off the bus.",
            79,
            "0000:3b:00",
            812917,
            "python3",
        ),
        ("NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.", 79, "0000:02:00", None, None),
        ("NVRM: Xid (0000:03:00): 14, Channel 00000001", 14, "0000:03:00", None, None),
        (
            "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            79,
            "0000:05:00",
            None,
            None,
        ),
        (
            "[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (0x021425c6 0x00000000)",
            149,
            "0009:01:00",
            None,
            None,
        ),
        (
            "6,1234,5140900,-;NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=pt_main_thread, DBE (double bit error)",
            48,
            "0000:3b:00",
            1,
            "pt_main_thread",
        ),
    ],
)
def test_xid_lines_across_driver_versions(line: str, xid: int, pci: str, pid: int | None, name: str | None) -> None:
    (e,) = parse(line)
    assert (e.kind, e.xid, e.pci, e.pid, e.process) == ("xid", xid, pci, pid, name)


def test_fallen_off_the_bus_without_an_xid_in_its_three_shapes() -> None:
    one = parse("NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.")
    older = parse("Mar 26 12:33:30 Ubuntu-PC kernel: NVRM: GPU at 0000:65:00.0 has fallen off the bus.")
    multi = parse(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
    )
    assert [(e.kind, e.pci) for e in one + older + multi] == [
        ("fallen_off_bus", "0000:2b:00"),
        ("fallen_off_bus", "0000:65:00"),
        ("fallen_off_bus", "0000:b3:00"),
    ]
    # /dev/kmsg escapes a multi-line message's newlines as \x0a within one record
    (k,) = parse(
        "3,77,1843308145,-;NVRM: The NVIDIA GPU 0000:b3:00.0\\x0aNVRM: fallen off the bus and is not responding to commands."
    )
    assert k.pci == "0000:b3:00" and k.seq == 77


def test_segfaults_general_protection_and_sigbus() -> None:
    seg, gpf, bus = parse(
        "[ 8724.076133] python3[3720]: segfault at 2993 ip 00007f2d98068af0 sp 00007fffaa6987e8 error 4 in libnccl.so.2[7f2d98046000+42000] likely on CPU 3 (core 3, socket 0)",
        "Apr  5 12:23:39 serverwuss kernel: [ 6089.911802] pan[8423] general protection ip:7fd565c807b0 sp:7fff714c4ce8 error:0 in libc-2.8.90.so[7fd565bfe000+169000]",
        "[ 99.1] /usr/bin/python3.11: python3: potentially unexpected fatal signal 7.",
    )
    assert (seg.kind, seg.pid, seg.process) == ("segfault", 3720, "python3")
    assert (gpf.kind, gpf.pid, gpf.process) == ("gpf", 8423, "pan")
    assert bus.kind == "sigbus"


def test_every_time_prefix() -> None:
    assert split_kernel_prefix("[ 1843.308145] x")[0].since_boot == 1843.308145
    assert split_kernel_prefix("6,339,5140900,-;x")[0].since_boot == 5.1409
    iso = split_kernel_prefix("2025-05-18T19:02:39+0000 host kernel: NVRM: x")
    assert iso[0].wall == 1747594959.0 and iso[1] == "NVRM: x"
    assert split_kernel_prefix("2025-05-18T19:02:39.123456+00:00 host kernel: x")[0].wall == 1747594959.123456
    syslog = split_kernel_prefix("May 18 19:02:39 kernel: NVRM: x", year=2025)  # journalctl's short format, no host
    assert syslog[1] == "NVRM: x" and syslog[0].wall == time.mktime((2025, 5, 18, 19, 2, 39, 0, 0, -1))
    assert split_kernel_prefix("kernel: NVRM: x")[1] == "NVRM: x"


def test_pci_addresses_in_one_form() -> None:
    assert normalize_pci("00000000:3B:00.0") == normalize_pci("PCI:0000:3b:00") == "0000:3b:00"
    assert normalize_pci("0009:01:00.0") == "0009:01:00"
    assert normalize_pci("nonsense") is None and normalize_pci(None) is None


@given(st.text(max_size=400))
def test_the_parser_never_raises(line: str) -> None:
    parse(line, "NVRM: " + line, "Killed process " + line, "oom-kill:constraint=" + line)


# --------------------------------------------------------------------------------------------------------- readers
def test_kmsg_records_are_read_once_each_in_sequence(tmp_path: Path) -> None:
    ring = tmp_path / "kmsg"
    ring.write_text(
        "6,1,100,-;first\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
        "3,2,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n",
        encoding="utf-8",
    )
    reader = KmsgReader(str(ring))
    reader.open()
    assert reader.read() == [
        "6,1,100,-;first",
        "3,2,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
    ]
    assert reader.read() == []
    with ring.open("a", encoding="utf-8") as f:
        f.write("4,3,3000000,-;later\n4,2,3000001,-;an older sequence number: already read\n")
    assert reader.read() == ["4,3,3000000,-;later"]
    reader.close()


def test_kmsg_that_may_not_be_opened_says_why(tmp_path: Path) -> None:
    with pytest.raises(LiveUnavailable, match="No such file"):
        KmsgReader(str(tmp_path / "absent")).open()


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="this user may not read /dev/kmsg")
def test_the_real_kernel_ring_reads_with_wall_times() -> None:
    log = KernelLog("/nonexistent-run", live=[KmsgReader()])
    state = log.sample()
    log.close()
    assert state.source == "kmsg" and state.available and state.error is None
    reader = KmsgReader()
    lines = reader.read(limit=100)
    reader.close()
    seqs = [int(line.split(",", 2)[1]) for line in lines]
    assert lines and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for e in state.events:
        assert e.time is not None and e.time <= time.time() + 1


def test_journalctl_then_only_what_follows_its_cursor(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    argv = script(
        tmp_path,
        "journalctl.py",
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "if '--after-cursor' in sys.argv:\n"
        "    print('2025-05-18T19:05:00+0000 h kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=9, name=python3, DBE')\n"
        "    print('-- cursor: s=2')\n"
        "else:\n"
        "    print('2025-05-18T19:02:39+0000 h kernel: Out of memory: Killed process 4242 (python3) total-vm:1kB, "
        "anon-rss:1024kB, file-rss:0kB, shmem-rss:0kB')\n"
        "    print('-- cursor: s=1')\n",
    )
    clock = FakeClock()
    log = KernelLog(
        tmp_path, live=[KmsgReader(str(tmp_path / "no-kmsg")), CommandReader("journalctl", argv, 10.0)], clock=clock
    )
    first = log.sample()
    assert first.source == "journalctl" and [e.kind for e in first.events] == ["oom_kill"]
    assert first.events[0].time == 1747594959.0
    clock.advance(10)
    assert log.sample().events == first.events  # a process to start: not run again within command_every_s
    assert len(calls.read_text().splitlines()) == 1
    clock.advance(30)
    second = log.sample()
    assert [e.kind for e in second.events] == ["oom_kill", "xid"]
    assert calls.read_text().splitlines()[-1].endswith("--show-cursor --after-cursor s=1")


def test_a_failing_journalctl_falls_back_to_dmesg_and_says_nothing_is_wrong(tmp_path: Path) -> None:
    journal = script(tmp_path, "journalctl.py", "print('No journal files were found.', file=sys.stderr)\nsys.exit(1)")
    ring = tmp_path / "ring"
    ring.write_text("[  10.000000] hello\n[  20.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    dmesg = script(tmp_path, "dmesg.py", f"print(open({str(ring)!r}).read(), end='')")
    log = KernelLog(
        tmp_path,
        live=[
            KmsgReader(str(tmp_path / "no-kmsg")),
            CommandReader("journalctl", journal, 10.0),
            CommandReader("dmesg", dmesg, 10.0),
        ],
        boot_time=lambda: BOOT,
        command_every_s=0,
    )
    state = log.sample()
    assert state.source == "dmesg" and state.error is None
    assert [(e.kind, e.time) for e in state.events] == [("xid", BOOT + 20.0)]
    with ring.open("a") as f:
        f.write("[  30.000000] python3[77]: segfault at 0 ip 0 sp 0 error 4 in libc.so.6[1+2]\n")
    assert [e.kind for e in log.sample().events] == ["xid", "segfault"]  # the ring read again: only what is new


def test_no_live_log_at_all_is_one_line_and_retried_later(tmp_path: Path) -> None:
    clock = FakeClock()
    hang = script(tmp_path, "dmesg.py", "time.sleep(60)")
    log = KernelLog(
        tmp_path,
        live=[KmsgReader(str(tmp_path / "no-kmsg")), CommandReader("dmesg", hang, 0.3)],
        clock=clock,
        retry_s=60,
    )
    state = log.sample()
    assert not state.available and state.source == "none"
    assert state.error is not None and "no-kmsg" in state.error and "no answer within 0.3s" in state.error
    started = time.monotonic()
    log.sample()  # not retried before retry_s: no second 0.3 s wait
    assert time.monotonic() - started < 0.25


def test_saved_logs_are_read_incrementally_and_only_as_regular_files(tmp_path: Path) -> None:
    saved = tmp_path / "dmesg.log"
    saved.write_text("[  5.0] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=python3, Graphics Exception\n")
    (tmp_path / "kern.log").symlink_to(saved)
    os.mkfifo(tmp_path / "kernel.log")
    log = KernelLog(tmp_path, mode="files", boot_time=lambda: BOOT)
    state = log.sample()
    assert state.source == "files" and state.files == (str(saved),)
    assert [e.xid for e in state.events] == [13]
    assert (
        state.error is not None and "a symbolic link: not read" in state.error and "not a regular file" in state.error
    )
    with saved.open("a") as f:
        f.write("[  6.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fall")  # a line still being written
    assert [e.xid for e in log.sample().events] == [13]
    with saved.open("a") as f:
        f.write("en off the bus.\n")
    assert [e.xid for e in log.sample().events] == [13, 79]
    saved.write_text("[  7.0] python3[9]: segfault at 0 ip 0 sp 0 error 4\n")  # truncated and rewritten
    assert [e.kind for e in log.sample().events] == ["segfault"]


def test_relative_times_in_a_saved_log_only_for_this_boot(tmp_path: Path) -> None:
    saved = tmp_path / "dmesg.log"
    saved.write_text("[  100.5] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    now = time.time()
    os.utime(saved, (now, now))
    this_boot = KernelLog(tmp_path, mode="files", boot_time=lambda: now - 1000).sample()
    assert this_boot.events[0].time == pytest.approx(now - 1000 + 100.5)
    earlier = tmp_path / "old"
    earlier.mkdir()
    (earlier / "dmesg.log").write_text(saved.read_text())
    os.utime(earlier / "dmesg.log", (now - 5000, now - 5000))  # written before this boot: its stamps say nothing
    assert KernelLog(earlier, mode="files", boot_time=lambda: now - 1000).sample().events[0].time is None


def test_the_same_message_live_and_saved_is_one_event(tmp_path: Path) -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    (tmp_path / "dmesg.log").write_text(f"[  20.000000] {line}\n")
    os.utime(tmp_path / "dmesg.log", (BOOT + 30, BOOT + 30))
    ring = tmp_path / "kmsg"
    ring.write_text(f"3,9,20000000,-;{line}\n")
    state = KernelLog(tmp_path, live=[KmsgReader(str(ring))], boot_time=lambda: BOOT).sample()
    assert len(state.events) == 1 and state.events[0].time == BOOT + 20.0


def test_off_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "dmesg.log").write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    state = KernelLog(tmp_path, mode="off").sample()
    assert state.events == () and state.source == "none"


def test_events_name_the_gpu_nvml_knows_by_its_pci_address() -> None:
    (e,) = parse("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
    gpus = (
        GpuState(0, None, None, None, None, None, None, None, None, health=GpuHealth(pci_bus_id="00000000:1A:00.0")),
        GpuState(3, None, None, None, None, None, None, None, None, health=GpuHealth(pci_bus_id="00000000:3B:00.0")),
    )
    state = with_gpus(KernelLogState("kmsg", True, events=(e,)), gpus)
    assert state.events[0].gpu == 3


def test_a_saved_log_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    saved = tmp_path / "dmesg.log"
    saved.write_text("x\n")
    saved.chmod(0)
    state = KernelLog(tmp_path, mode="files").sample()
    assert state.error is not None and "Permission denied" in state.error
    saved.chmod(stat.S_IRUSR)
