"""The small things a new user meets on the command line: every option described, no value silently ignored, every
mistake of a config file named, nothing created where a path was mistyped."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlwatch.cli import build_parser, parse, run
from rlwatch.tui.launch import DASHBOARD_HANDLERS, main
from tests.snapshot_data import utc_timezone


def test_every_fleet_option_is_described(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["fleet", "--help"])
    out = capsys.readouterr().out
    assert "--prometheus URL" in out and "--config FILE" in out
    fleet = next(a for a in build_parser()._actions if a.dest == "command").choices["fleet"]  # type: ignore[index]
    for action in fleet._actions:
        assert action.help, action.dest


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_an_interval_that_is_not_positive_is_refused_not_ignored(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(parse(["dashboard", str(tmp_path), "--interval", value]), DASHBOARD_HANDLERS)
    assert code == 2
    assert f"--interval: must be greater than 0, got {float(value)}" in capsys.readouterr().err


def test_a_config_with_two_mistakes_names_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("interval_s: fast\ngpu:\n  bakend: nvml\n")
    code = run(parse(["report", str(tmp_path), "--config", str(cfg)]))
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(err) == 2
    assert err[0].startswith(f"rlwatch: {cfg}:1: interval_s:")
    assert err[1].startswith(f"rlwatch: {cfg}:3: gpu.bakend: unknown key")


def test_snapshot_into_a_missing_directory_is_refused_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "nonexistent" / "x.svg"
    code = main(["snapshot", str(tmp_path), "--out", str(out)])
    assert code == 2
    assert "no such directory" in capsys.readouterr().err
    assert not out.parent.exists()


def test_make_demo_installs_without_the_setuptools_warning_block() -> None:
    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    assert 'PYTHONWARNINGS="ignore:Editable installation"' in makefile


def test_a_demo_without_rlwatch_yaml_is_still_marked_simulated(tmp_path: Path) -> None:
    """trl-colocated, nccl-timeout and hang write no rlwatch.yaml (found from evidence, as on a real host): the demo's
    render says SIMULATED all the same, and the windows that are durations of the run go as fast as the run does
    (a hang at 20 times the speed is declared after 3 s of silence, not a minute)."""
    from rlwatch.discover.load import resolve_config
    from rlwatch.tui.launch import _feed, demo_config
    from rlwatch.tui.snapshot import render_svg

    cfg = demo_config(tmp_path, 20.0)
    assert cfg.simulated and cfg.thresholds.hang_floor_s == 3.0 and cfg.thresholds.startup_s == 90.0
    plain_cfg = resolve_config(tmp_path, None, "auto")[0]
    with utc_timezone():
        svg = render_svg(_feed(tmp_path, cfg, warmup_s=0.0), size=(120, 30))
        plain = render_svg(_feed(tmp_path, plain_cfg, warmup_s=0.0), size=(120, 30))
    assert "SIMULATED" in svg
    assert "SIMULATED" not in plain
    (tmp_path / "rlwatch.yaml").write_text("profile: generic\nthresholds: {hang_floor_s: 7}\n")
    assert demo_config(tmp_path, 20.0).thresholds.hang_floor_s == 7  # the simulator's own config already scaled it


def test_one_snapshot_renders_several_sizes_of_the_same_moment(tmp_path: Path) -> None:
    with utc_timezone():
        code = main(["snapshot", str(tmp_path), "--out", str(tmp_path / "{size}.svg"), "--size", "80x24,200x60"])
    assert code == 0
    small, big = (tmp_path / "80x24.svg").read_text(), (tmp_path / "200x60.svg").read_text()
    assert small.startswith("<svg") and big.startswith("<svg") and small != big


def test_several_sizes_need_a_place_for_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["snapshot", str(tmp_path), "--out", str(tmp_path / "x.svg"), "--size", "80x24,200x60"])
    assert code == 2
    assert "--out must hold {size}" in capsys.readouterr().err


def test_version_says_which_event_path_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35: a person (or tests/test_wheel.py) can ask whether the compiled event path runs, and why not."""
    from rlwatch.logs import events

    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args(["--version"])
    assert stop.value.code == 0
    said = capsys.readouterr().out
    assert said.startswith("rlwatch ")
    assert ("event path: compiled" in said) == events.NATIVE
    monkeypatch.setenv("RLWATCH_NATIVE", "0")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert "event path: Python (RLWATCH_NATIVE=0)" in capsys.readouterr().out


def test_a_watchdog_with_no_policy_does_not_say_it_acts() -> None:
    """It holds the run's lock, but with no policy enabled it touches nothing: "ACTS on this run" would alarm."""
    from rlwatch.cli import acting_words

    assert acting_words({"acting": True, "policies": 0}).startswith("takes no action")
    assert acting_words({"acting": True, "policies": 2}) == "ACTS on this run"
    assert acting_words({"acting": False, "policies": 2}).startswith("only watches")
