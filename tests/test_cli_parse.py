"""How the command line is read: the dashboard is the default, and every command is spelt as its help says."""

from __future__ import annotations

import pytest

from rlwatch.cli import COMMANDS, build_parser, parse


@pytest.mark.parametrize(
    ("argv", "command", "run_dir"),
    [
        ([], "dashboard", "."),
        (["runs/a"], "dashboard", "runs/a"),
        (["--readonly", "runs/a"], "dashboard", "runs/a"),
        (["dashboard"], "dashboard", "."),
        (["dashboard", "runs/a"], "dashboard", "runs/a"),
        (["dashboard", "--readonly", "runs/a"], "dashboard", "runs/a"),
        (["report", "runs/a", "--json"], "report", "runs/a"),
        (["watch", "runs/a"], "watch", "runs/a"),
        (["act", "kill-zombies", "--dry-run", "runs/a"], "act", "runs/a"),
    ],
)
def test_commands_and_their_run_directory(argv: list[str], command: str, run_dir: str) -> None:
    ns = parse(argv)
    assert (ns.command, ns.run_dir) == (command, run_dir)


def test_every_command_the_parser_has_is_known_as_one() -> None:
    """A command missing from COMMANDS is taken for a run directory of the implied dashboard (`rlwatch dashboard
    DIR` once failed with "unrecognized arguments: DIR")."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices or ()) == set(COMMANDS)


def test_a_stray_argument_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["report", "runs/a", "runs/b"])
    assert exc.value.code == 2
    assert "unrecognized arguments: runs/b" in capsys.readouterr().err


def test_watch_complete_only_is_a_flag_off_by_default() -> None:
    """`watch --complete-only` suppresses the partial records of a big backlog's newest part; without it they come."""
    assert parse(["watch", "runs/a", "--json", "--complete-only"]).complete_only is True
    assert parse(["watch", "runs/a", "--json"]).complete_only is False
