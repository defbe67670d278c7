"""A directory of several live runs: the dashboard lets the person pick one instead of exiting with the list.

Driven through Textual's Pilot on the chooser itself; the runs are real directories that discovery reads as separate
runs (each its own logs and checkpoints), so the list on screen is the list SeveralRuns carries."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from textual.widgets import OptionList, Static

from rlwatch.cli import load
from rlwatch.discover.discovery import SeveralRuns
from rlwatch.tui.screens.runs import ChooseRunApp, ChooseRunScreen


def _two_runs(root: Path) -> None:
    """Two unrelated runs side by side, each with its own logs and checkpoints (as `cd /tmp; rlwatch` finds)."""
    for name in ("runA", "runB"):
        (root / name / "logs").mkdir(parents=True)
        (root / name / "logs" / "train.log").write_text("step 1/100 loss 2.0\nstep 2/100 loss 1.9\n")
        (root / name / "output" / "checkpoint-5").mkdir(parents=True)
        (root / name / "output" / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5}')


def _several(root: Path) -> SeveralRuns:
    args = argparse.Namespace(run_dir=str(root), config=None, profile="auto", interval=None, readonly=False)
    with pytest.raises(SeveralRuns) as said:
        load(args)
    return said.value


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_person_picks_the_second_run_with_the_arrow_and_enter(tmp_path: Path, size: tuple[int, int]) -> None:
    _two_runs(tmp_path)
    exc = _several(tmp_path)
    assert [p.name for p, _ in exc.runs] == ["runA", "runB"]
    app = ChooseRunApp(exc.run_dir, exc.runs)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ChooseRunScreen)
        title = str(screen.query_one("#runs-title", Static).render())
        assert "holds 2 separate runs, not one" in title and "Pick the one to watch" in title
        options = screen.query_one("#runs", OptionList)
        shown = [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]
        assert shown[0].startswith("runA") and shown[1].startswith("runB"), shown
        assert "logs" in shown[0]
        await pilot.press("down", "enter")
        await pilot.pause()
    assert app.return_value == tmp_path / "runB"
    # The chosen directory is one run: the dashboard loads it as any other.
    _cfg, run_dir, _ = load(
        argparse.Namespace(run_dir=str(app.return_value), config=None, profile="auto", interval=None, readonly=False)
    )
    assert run_dir == tmp_path / "runB"


async def test_q_leaves_the_list_without_watching_any(tmp_path: Path) -> None:
    _two_runs(tmp_path)
    exc = _several(tmp_path)
    app = ChooseRunApp(exc.run_dir, exc.runs)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value is None
