"""Each command's help and mistakes, as the real command prints them: its own usage (`usage: rlwatch report …`, not
the top-level usage run into it), one line naming the command for a mistake (exit 2), every argument described,
the demo's scenarios in words with the default named, and `--version` on standard output."""

from __future__ import annotations

import pytest

from rlwatch.cli import COMMANDS, build_parser
from tests.faults.conftest import run_cli

pytestmark = pytest.mark.slow  # each case starts the real command


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_commands_help_starts_with_its_own_usage(command: str) -> None:
    done = run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: rlwatch {command} "), done.stdout[:200]
    assert "rlwatch COMMAND" not in done.stdout and "(rlwatch COMMAND --help" not in done.stdout


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["report", "--profile", "nosuch"], "rlwatch report: error: argument --profile: invalid choice: 'nosuch'"),
        (["act", "nosuchaction"], "rlwatch act: error: argument ACTION: invalid choice: 'nosuchaction'"),
        (["--interval", "abc"], "rlwatch: error: argument --interval: invalid float value: 'abc'"),
        (["snapshot", "--demo"], "rlwatch snapshot: error: the following arguments are required: --out"),
        (["report", "runs/a", "runs/b"], "rlwatch: error: unrecognized arguments: runs/b"),
    ],
)
def test_an_argument_mistake_is_one_line_naming_the_command(argv: list[str], said: str) -> None:
    done = run_cli(*argv)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(said), lines[0]
    assert "usage:" not in done.stderr and "COMMAND" not in done.stderr
    assert lines[0].endswith("--help")  # where the options are listed


def test_demo_help_names_the_default_and_says_each_scenario_in_words() -> None:
    from rlwatch.sim import SCENARIOS

    out = run_cli("demo", "--help").stdout
    assert "default: server-crash" in out
    assert "server-crash (the default)" in out
    assert "incident" not in out  # the README's numbering means nothing here
    for name in SCENARIOS:
        assert f"\n  {name}" in out
    for option in ("--speed FACTOR", "--readonly", "--scenario NAME"):
        assert option in out
    assert "faster than real time" in out and "disable every action key" in out


def test_the_server_crash_scenario_says_the_trainer_retries_before_it_dies() -> None:
    """`demo --help` said "the trainer dies": it retries, recovers when the server is restarted (s), and dies only if
    nobody restarts it."""
    from rlwatch.sim import SCENARIOS

    said = " ".join(SCENARIOS["server-crash"].split())
    assert "retries" in said and "unless the server is restarted (s)" in said, said
    assert not said.endswith("the trainer dies"), said


def test_act_help_lists_each_action_with_what_it_does() -> None:
    out = run_cli("act", "--help").stdout
    for action in ("restart-workers", "kill-zombies", "resume", "restart-server", "rearm"):
        assert f"{action} (" in out, action


def test_sim_snapshot_and_service_help_describe_their_arguments() -> None:
    sim = run_cli("sim", "--help").stdout
    assert "the run directory to write" in sim and "--seed SEED" in sim and "faster than real time" in sim
    assert "hang\n" in sim  # the scenarios are listed
    snapshot = run_cli("snapshot", "--help").stdout
    assert "the run to render" in snapshot and "with --demo: which scenario" in snapshot
    service = run_cli("service", "--help").stdout
    assert "install the unit or hook" in service


def test_every_argument_of_every_command_is_described() -> None:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name, parser in (sub.choices or {}).items():  # type: ignore[union-attr]
        for action in parser._actions:
            assert action.help, f"{name} {action.dest}"


def test_version_goes_to_standard_output() -> None:
    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("rlwatch ") and done.stderr == ""  # `rlwatch --version > f` keeps it in f
