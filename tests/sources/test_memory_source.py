"""Memory source: cgroup OOM counters (v1, v2, none), psutil readings, the exhaustion forecast, disk space."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import psutil
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rlwatch.common import forecast
from rlwatch.common.clock import FakeClock
from rlwatch.sources.disk import disk_state, probe_disk
from rlwatch.sources.memory import (
    MemorySource,
    VmReading,
    parse_memory_events,
    parse_oom_control,
    parse_self_cgroup,
    read_oom_kills,
)

GIB = 1024**3

V2_EVENTS = "low 0\nhigh 12\nmax 40\noom 3\noom_kill 2\noom_group_kill 0\n"
V1_OOM_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"


def make_v2(root: Path, events: str = V2_EVENTS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "memory.events").write_text(events)
    return root


def make_v1(root: Path, text: str = V1_OOM_CONTROL) -> Path:
    (root / "memory").mkdir(parents=True, exist_ok=True)
    (root / "memory" / "memory.oom_control").write_text(text)
    return root


# ----------------------------------------------------------------------------------------------------- parsers
def test_parse_memory_events_reads_every_counter() -> None:
    parsed = parse_memory_events(V2_EVENTS)
    assert parsed["oom_kill"] == 2
    assert parsed["oom"] == 3
    assert parsed["high"] == 12


def test_parse_oom_control_reads_the_kill_counter() -> None:
    assert parse_oom_control(V1_OOM_CONTROL) == {"oom_kill_disable": 0, "under_oom": 0, "oom_kill": 7}


def test_parsers_skip_junk_lines() -> None:
    assert parse_memory_events("oom_kill x\n\nnonsense\noom 1 2\n  oom_kill   5  \n") == {"oom_kill": 5}
    assert parse_oom_control("") == {}


@given(st.text())
def test_parse_memory_events_never_raises(text: str) -> None:
    parsed = parse_memory_events(text)
    assert all(isinstance(k, str) and isinstance(v, int) for k, v in parsed.items())


@given(st.text())
def test_parse_oom_control_never_raises(text: str) -> None:
    parsed = parse_oom_control(text)
    assert all(" " not in k and isinstance(v, int) for k, v in parsed.items())


@given(st.text())
def test_parse_self_cgroup_never_raises(text: str) -> None:
    parsed = parse_self_cgroup(text)
    assert all(path.startswith("/") for path in parsed.values())


def test_parse_self_cgroup_v1_and_v2() -> None:
    parsed = parse_self_cgroup("12:cpu,cpuacct:/a\n4:memory:/kube/pod1\n0::/kube/pod1/ctr\n")
    assert parsed == {"cpu": "/a", "cpuacct": "/a", "memory": "/kube/pod1", "": "/kube/pod1/ctr"}


# -------------------------------------------------------------------------------------------- OOM kill counter
def test_v2_counter_of_the_own_cgroup_is_preferred(tmp_path: Path) -> None:
    make_v2(tmp_path, "oom_kill 1\n")
    make_v2(tmp_path / "kube" / "pod1", "oom_kill 9\n")
    assert read_oom_kills(tmp_path, "0::/kube/pod1\n") == (9, None)
    assert read_oom_kills(tmp_path, "0::/elsewhere\n") == (1, None)


def test_v1_counter(tmp_path: Path) -> None:
    make_v1(tmp_path)
    assert read_oom_kills(tmp_path, None) == (7, None)


def test_v1_kernel_without_counter_is_not_available(tmp_path: Path) -> None:
    make_v1(tmp_path, "oom_kill_disable 0\nunder_oom 0\n")
    value, error = read_oom_kills(tmp_path, None)
    assert value is None
    assert error is not None and "\n" not in error


def test_memory_source_v2(tmp_path: Path) -> None:
    make_v2(tmp_path)
    state = MemorySource(FakeClock(), cgroup_root=tmp_path).sample()
    assert state.oom_kills == 2


def test_memory_source_counts_new_oom_kills(tmp_path: Path) -> None:
    make_v2(tmp_path, "oom_kill 0\n")
    source = MemorySource(FakeClock(), cgroup_root=tmp_path)
    assert source.sample().oom_kills == 0
    (tmp_path / "memory.events").write_text("oom 1\noom_kill 1\n")
    assert source.sample().oom_kills == 1


def test_memory_source_without_cgroup_files(tmp_path: Path) -> None:
    source = MemorySource(FakeClock(), cgroup_root=tmp_path / "missing")
    state = source.sample()
    assert state.oom_kills is None
    assert state.total_bytes is not None  # the rest still works
    assert source.error is not None and "\n" not in source.error


def test_memory_source_unreadable_counter_file(tmp_path: Path) -> None:
    make_v2(tmp_path)
    (tmp_path / "memory.events").unlink()
    (tmp_path / "memory.events").mkdir()  # reading a directory fails even for root
    source = MemorySource(FakeClock(), cgroup_root=tmp_path)
    assert source.sample().oom_kills is None
    assert source.error


def test_memory_source_reads_real_host_memory(tmp_path: Path) -> None:
    state = MemorySource(FakeClock(), cgroup_root=tmp_path).sample()
    total = psutil.virtual_memory().total
    assert state.total_bytes == total
    assert state.available_bytes is not None and 0 < state.available_bytes <= total
    assert state.swap_total_bytes is not None and state.swap_used_bytes is not None
    assert state.forecast_exhausted_at is None  # one sample is no trend


def test_reader_failure_is_reported_not_raised(tmp_path: Path) -> None:
    def broken() -> VmReading:
        raise OSError("/proc/meminfo: no such file")

    source = MemorySource(FakeClock(), cgroup_root=tmp_path, reader=broken)
    state = source.sample()
    assert state.total_bytes is None and state.available_bytes is None
    assert source.error is not None and "meminfo" in source.error


# ------------------------------------------------------------------------------------------------- forecasting
class Falling:
    """Available memory that falls by ``rate`` bytes per second of the fake clock."""

    def __init__(self, clock: FakeClock, start: int, rate: float, total: int = 32 * GIB) -> None:
        self.clock, self.start, self.rate, self.total = clock, start, rate, total
        self.t0 = clock.monotonic()

    def __call__(self) -> VmReading:
        available = int(self.start - self.rate * (self.clock.monotonic() - self.t0))
        return VmReading(self.total, max(0, available), 0, 0)


def test_forecast_of_a_steady_leak(tmp_path: Path) -> None:
    clock = FakeClock()
    rate = 2 * GIB / 3600  # 2 GiB per hour
    source = MemorySource(clock, cgroup_root=tmp_path, reader=Falling(clock, 8 * GIB, rate))
    for _ in range(60):
        state = source.sample()
        clock.advance(10)
    state = source.sample()
    # 8 GiB minus 10 minutes of leak remain, at 2 GiB/h: about 3h 50m from now.
    remaining = 8 * GIB - rate * 600
    assert state.forecast_exhausted_at is not None
    assert state.forecast_exhausted_at == pytest.approx(clock.time() + remaining / rate, rel=1e-3)


def test_no_forecast_while_memory_is_flat_or_rising(tmp_path: Path) -> None:
    for rate in (0.0, -GIB / 3600):
        clock = FakeClock()
        source = MemorySource(clock, cgroup_root=tmp_path, reader=Falling(clock, 8 * GIB, rate))
        for _ in range(60):
            source.sample()
            clock.advance(10)
        assert source.sample().forecast_exhausted_at is None


def test_no_forecast_for_a_wobble(tmp_path: Path) -> None:
    clock = FakeClock()
    source = MemorySource(clock, cgroup_root=tmp_path, reader=Falling(clock, 8 * GIB, 100 * 1024 / 60))
    for _ in range(60):
        source.sample()
        clock.advance(10)
    assert source.sample().forecast_exhausted_at is None  # 1 MB over ten minutes is noise


def test_forecast_ignores_a_wall_clock_jump(tmp_path: Path) -> None:
    clock = FakeClock()
    rate = 4 * GIB / 3600
    source = MemorySource(clock, cgroup_root=tmp_path, reader=Falling(clock, 8 * GIB, rate))
    for i in range(60):
        source.sample()
        clock.advance(10)
        if i == 30:
            clock.jump_wall(-3600)  # NTP steps the clock back an hour
    at = source.sample().forecast_exhausted_at
    assert at is not None
    assert at == pytest.approx(clock.time() + (8 * GIB - rate * 600) / rate, rel=1e-3)


def test_ram_history_is_percent_used(tmp_path: Path) -> None:
    clock = FakeClock()
    source = MemorySource(clock, cgroup_root=tmp_path, reader=lambda: VmReading(100, 25, 10, 5))
    source.sample()
    clock.advance(2)
    source.sample()
    ram = source.ram_history()
    assert ram.values == (75.0, 75.0)
    assert ram.times[1] - ram.times[0] == 2
    assert source.swap_history().values == (50.0, 50.0)


def test_growth_per_hour_of_a_line() -> None:
    samples = [(float(t), 1000.0 + 2.0 * t) for t in range(0, 600, 5)]
    assert forecast.growth_per_hour(samples) == pytest.approx(7200.0)


def test_growth_needs_enough_span() -> None:
    assert forecast.growth_per_hour([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) is None
    assert forecast.growth_per_hour([(0.0, 1.0), (100.0, 2.0)]) is None  # too few samples


def test_a_start_up_that_grew_once_and_stopped_is_no_growth() -> None:
    # As a torchrun agent read live on a GPU host: 150 MB while torch is imported, 540 MB from its 8th second on.
    startup = [(float(t), 150e6 + 390e6 * t / 8) for t in range(0, 8)]
    flat = [(float(t), 540e6 + (t % 3) * 1e5) for t in range(8, 66, 2)]
    assert forecast.slope(startup + flat) is not None and forecast.slope(startup + flat) * 3600 > 512 * 1024**2
    growth = forecast.growth_per_hour(startup + flat)
    assert growth is not None and growth < 512 * 1024**2 / 10
    # A leak that goes on is still read whole.
    leak = [(float(t), 540e6 + 1e5 * t) for t in range(0, 66, 2)]
    assert forecast.growth_per_hour(startup + [(t + 8, v) for t, v in leak]) == pytest.approx(3.6e8, rel=0.3)


def test_growth_uses_only_the_recent_window() -> None:
    old = [(float(t), 5000.0 - t) for t in range(0, 1000, 10)]  # fell long ago
    recent = [(float(t), 4000.0 + t) for t in range(1000, 1600, 10)]  # rising for the last ten minutes
    growth = forecast.growth_per_hour(old + recent, window_s=600)
    assert growth is not None and growth > 0


finite = st.floats(allow_nan=True, allow_infinity=True)


@given(st.lists(st.tuples(finite, finite), max_size=40))
@example([(0.0, 0.0), (0.5, 2.4967960206421054e304)])  # a finite slope whose hour overflows (found by the search)
def test_growth_per_hour_never_raises(samples: list[tuple[float, float]]) -> None:
    result = forecast.growth_per_hour(samples, min_span_s=0, min_samples=2)
    assert result is None or math.isfinite(result)


@given(st.lists(st.tuples(finite, finite, finite), max_size=40))
def test_exhausted_at_never_raises(samples: list[tuple[float, float, float]]) -> None:
    result = forecast.exhausted_at(samples, min_span_s=0, min_samples=2)
    assert result is None or isinstance(result, float)


# ------------------------------------------------------------------------------------------------------- disk
def test_disk_state_of_an_existing_directory(tmp_path: Path) -> None:
    state = disk_state(tmp_path)
    usage = shutil.disk_usage(tmp_path)
    assert state.total_bytes == usage.total
    assert state.free_bytes is not None and 0 <= state.free_bytes <= usage.total


def test_disk_state_of_a_directory_not_created_yet(tmp_path: Path) -> None:
    state = disk_state(tmp_path / "checkpoints" / "not" / "yet")
    assert state.path.endswith("yet")
    assert state.total_bytes == shutil.disk_usage(tmp_path).total


def test_disk_state_error_is_one_line() -> None:
    state, error = probe_disk("bad\0path")
    assert state.free_bytes is None and state.total_bytes is None
    assert error is not None and "\n" not in error
