"""The command line. Headless commands live here; the dashboard commands are dispatched by ``tui.launch``.

Every user mistake (bad config, missing directory, unknown scenario, taken port) ends in one line on stderr and exit
status 2; problems found on the host are exit status 1 (`report`), a run whose progress the evidence does not show
exit status 3; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TextIO

from rlwatch import __version__
from rlwatch.common.redact import clean_text, redact, redacted
from rlwatch.common.state import ActionPlan, Snapshot
from rlwatch.common.statefiles import StateFileError, write_file
from rlwatch.common.textsafe import clean_line
from rlwatch.common.trust import config_distrust
from rlwatch.config.models import Config
from rlwatch.discover.discovery import SeveralRuns
from rlwatch.discover.load import ConfigError, resolve_config
from rlwatch.discover.privsep import run_as_owner
from rlwatch.engine.diagnosis import backlog_text, human_bytes, human_duration

if TYPE_CHECKING:
    from rlwatch.engine.engine import Engine
    from rlwatch.export.notify.notifications import Notifications

HEADLESS = ("report", "watch", "sim", "init", "service", "notify")
DASHBOARD = ("dashboard", "demo", "snapshot", "fleet")
COMMANDS = HEADLESS + DASHBOARD + ("act",)


# How long `watch` waits for the host's processes and the server's probe before its first record.
FIRST_STATE_WAIT_S = 10.0


class UsageError(Exception):
    """A mistake on the command line or in the config: one line, exit 2."""


def _common(p: argparse.ArgumentParser, *, run_dir: bool = True) -> None:
    if run_dir:
        p.add_argument("run_dir", nargs="?", default=".", metavar="RUN_DIR", help="the run's directory (default: .)")
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="configuration file (default: RUN_DIR/rlwatch.yaml, else discovery)",
    )
    p.add_argument("--profile", choices=PROFILES, default="auto", metavar="NAME", help=PROFILE_HELP)


PROFILES = ["auto", "areal", "trl", "verl", "openrlhf", "workers", "generic"]
PROFILE_HELP = f"which framework's rules read the run: {', '.join(PROFILES)} (default: auto, from what is found)"


class _Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line naming the command (``rlwatch report: error: argument --profile:
    invalid choice: …``) and where its options are listed, instead of the usage block before it."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


class _Version(argparse.Action):
    """``--version``: the version and which event path runs (compiled or Python), looked up only when asked. On
    standard output, as every other tool's (``rlwatch --version > f`` keeps it)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from rlwatch.logs.native import which

        print(f"rlwatch {__version__} ({which()})", flush=True)
        parser.exit(0)


DEFAULT_SCENARIO = "server-crash"


class _ScenarioHelp(argparse.RawDescriptionHelpFormatter):
    """`demo --help` and `sim --help`: the list of scenarios is read from the simulator when the help is shown, so
    that parsing the command line of every other command does not import it (a few ms of each start). Each says what
    happens in words; the README's scenario table numbers its incidents, which mean nothing here."""

    def add_text(self, text: str | None) -> None:
        if text == _SCENARIOS_EPILOG:
            text = scenarios_text()
        super().add_text(text)


def scenarios_text() -> str:
    """Every scenario, one paragraph each: its name (the default marked) and what happens, wrapped under it."""
    import re
    import textwrap

    from rlwatch.sim import SCENARIOS

    lines = ["scenarios:"]
    for name, described in SCENARIOS.items():
        about = re.sub(r"^incident \d+:\s*", "", described)
        lines.append(f"  {name}{' (the default)' if name == DEFAULT_SCENARIO else ''}")
        lines.extend(textwrap.wrap(about, width=76, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(lines)


_SCENARIOS_EPILOG = "scenarios: (listed when the help is shown)"
SCENARIO_SPEED_HELP = "how many times faster than real time the simulated run goes (default: 1)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rlwatch",
        usage="rlwatch [RUN_DIR] [--config FILE] [--profile NAME] [--readonly] [--interval SECONDS]\n"
        "       rlwatch COMMAND [options]   (rlwatch COMMAND --help for its options)",
        description="Monitor and watchdog for LLM RL post-training on GPU pods.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "With no command, opens the dashboard on RUN_DIR (default: .):\n"
            "  --config FILE     configuration file (default: RUN_DIR/rlwatch.yaml, else discovery)\n"
            "  --profile NAME    auto, areal, trl, verl, openrlhf, workers, generic (default: auto)\n"
            "  --readonly        disable every action\n"
            "  --interval S      sampling interval in seconds\n"
            "\n"
            "Commands: report, watch, act, service, notify, snapshot, sim, init, demo, fleet, dashboard.\n"
            "Try it on a simulated host: rlwatch demo --scenario NAME (rlwatch demo --help lists them)."
        ),
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="the version, and which event path runs")
    # prog: each command's usage and errors start `rlwatch report`, not the whole top-level usage before it.
    sub = parser.add_subparsers(dest="command", prog="rlwatch")

    p = sub.add_parser("dashboard", help="the dashboard (default when no command is given)")
    _common(p)
    p.add_argument("--readonly", action="store_true", help="disable every action")
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="sampling interval")

    p = sub.add_parser(
        "demo",
        help="the dashboard on a simulated training host",
        description="The dashboard on a simulated training host: a scenario's processes, logs and GPU are played\n"
        "out in a temporary directory (removed on quit), and every action key works on them.",
        formatter_class=_ScenarioHelp,
        epilog=_SCENARIOS_EPILOG,
    )
    p.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME",
        help=f"which scenario to play (default: {DEFAULT_SCENARIO}); listed below",
    )
    p.add_argument("--speed", type=float, default=1.0, metavar="FACTOR", help=SCENARIO_SPEED_HELP)
    p.add_argument("--readonly", action="store_true", help="disable every action key (the dashboard only watches)")

    p = sub.add_parser("report", help="one-shot health report; exit 0 healthy, 1 problems, 2 usage error, 3 unknown")
    _common(p)
    p.add_argument("--json", action="store_true", help="the stable JSON report")

    p = sub.add_parser("watch", help="headless engine; prints changes as they happen")
    _common(p)
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.add_argument(
        "--complete-only",
        action="store_true",
        help="no partial records: over a big backlog, nothing until it is read (not what its newest part shows first)",
    )
    p.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="sampling interval")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long, counted once the logs' backlog is read",
    )
    p.add_argument(
        "--prometheus", metavar="HOST:PORT", help="also serve Prometheus metrics there (host defaults to 127.0.0.1)"
    )
    p.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="URL",
        help="tell this Apprise URL about findings and actions (repeatable; also RLWATCH_NOTIFY and notify: in the "
        "config; a URL on the command line is visible to other users in ps: prefer those)",
    )
    p.add_argument("--heartbeat", metavar="URL", help="GET this URL every notify.heartbeat_every_s (dead man's switch)")

    p = sub.add_parser("notify", help="the watchdog's notification targets; --test sends a test message")
    _common(p)
    p.add_argument(
        "--test",
        nargs="?",
        const="",
        default=None,
        metavar="URL",
        help="send a test message to URL, or to every configured target (exit 1 with the reason when one fails)",
    )

    p = sub.add_parser(
        "act",
        help="restart-workers | kill-zombies | resume | restart-server | rearm, safely",
        description="Plan one action on the run, show every process it would signal and every step, ask, then do "
        "it; every signal goes to the audit log.",
    )
    p.add_argument(
        "action",
        metavar="ACTION",
        choices=["restart-workers", "kill-zombies", "resume", "restart-server", "rearm"],
        help="restart-workers (the run's worker processes, for fresh memory), kill-zombies (stray processes "
        "holding the GPU), resume (start the trainer again from its last checkpoint), restart-server (the "
        "inference server), rearm (let the watchdog act again where it gave up)",
    )
    _common(p)
    p.add_argument(
        "--target",
        action="append",
        metavar="KEY",
        help="rearm: only this target the watchdog gave up on (repeatable; default: all)",
    )
    p.add_argument(
        "--pid",
        action="append",
        type=int,
        metavar="PID",
        help="kill-zombies: stop exactly this GPU holder, also one rlwatch cannot classify (repeatable)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--dry-run", action="store_true", help="print the plan and do nothing")
    p.add_argument(
        "--force", action="store_true", help="resume even if the trainer is alive or the recover info disagrees"
    )
    p.add_argument("--readonly", action="store_true", help=argparse.SUPPRESS)

    p = sub.add_parser("snapshot", help="render the dashboard to an SVG file without a terminal")
    p.add_argument(
        "run_dir", nargs="?", default=None, metavar="RUN_DIR", help="the run to render (or --demo, not both)"
    )
    p.add_argument("--demo", action="store_true", help="render a simulated host instead of RUN_DIR")
    p.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME",
        help=f"with --demo: which scenario (default: {DEFAULT_SCENARIO}; rlwatch demo --help lists them)",
    )
    p.add_argument(
        "--config", type=Path, metavar="FILE", help="configuration file (default: RUN_DIR/rlwatch.yaml, else discovery)"
    )
    p.add_argument("--profile", choices=PROFILES, default="auto", metavar="NAME", help=PROFILE_HELP)
    p.add_argument(
        "--out", type=Path, required=True, metavar="FILE.svg", help="where to write; with several sizes, holds {size}"
    )
    p.add_argument(
        "--size",
        default="120x40",
        metavar="COLSxROWS",
        help="terminal size; several, comma-separated (80x24,200x60), render the same moment at each",
    )

    p = sub.add_parser(
        "sim",
        help="run the simulated training host into DIR until interrupted",
        description="Run a scenario's simulated training host (its processes, logs and GPU) into DIR until\n"
        "interrupted, to point rlwatch, report or watch at.",
        formatter_class=_ScenarioHelp,
        epilog=_SCENARIOS_EPILOG,
    )
    p.add_argument("scenario", metavar="SCENARIO", help="which scenario to play (listed below)")
    p.add_argument("dir", type=Path, metavar="DIR", help="the run directory to write its logs and files into")
    p.add_argument("--speed", type=float, default=1.0, metavar="FACTOR", help=SCENARIO_SPEED_HELP)
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated numbers (loss, timings): the same seed, the same run"
    )

    p = sub.add_parser("init", help="write the discovered configuration to RUN_DIR/rlwatch.yaml")
    _common(p)
    p.add_argument("--force", action="store_true", help="overwrite an existing rlwatch.yaml")
    p.add_argument("--stdout", action="store_true", help="print instead of writing")

    p = sub.add_parser("fleet", help="many hosts at once")
    p.add_argument(
        "--prometheus",
        metavar="URL",
        help="a Prometheus that scrapes every host's exporter (http://HOST:9090): one row per host",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="a YAML file with fleet.prometheus or fleet.exporters (HOST:PORT of each exporter, read directly)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="read the fleet once and print each distributed job's verdict across its hosts, and each host, as JSON",
    )

    p = sub.add_parser("service", help="keep `rlwatch watch` alive: a systemd unit, or a start-up hook without one")
    p.add_argument("verb", choices=["install"], metavar="install", help="install the unit or hook (the only verb)")
    p.add_argument("run_dir", nargs="?", default=".", metavar="RUN_DIR", help="the run's directory (default: .)")
    p.add_argument("--config", type=Path, help="the configuration file the watchdog should use")
    p.add_argument("--user", action="store_true", help="a systemd user unit (~/.config/systemd/user)")
    p.add_argument("--print", action="store_true", help="print what would be written, write nothing")
    p.add_argument(
        "--mode",
        choices=["auto", "systemd", "hook"],
        default="auto",
        help="auto: a unit where systemd runs the system, else a start-up hook",
    )
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    args = list(argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first not in COMMANDS and not {"--version", "-h", "--help"} & set(args):
        args.insert(0, "dashboard")
    parser = build_parser()
    if args[:1] == ["dashboard"] and list(argv[:1]) != ["dashboard"]:
        # The dashboard implied (`rlwatch --interval abc`): its mistakes are said as `rlwatch: error: …`, as typed.
        sub = next(a for a in parser._actions if a.dest == "command")
        sub.choices["dashboard"].prog = "rlwatch"  # type: ignore[index]
    ns, extra = parser.parse_known_args(args)
    # argparse fills `act ACTION [RUN_DIR]` in one go: in `act kill-zombies --dry-run DIR` the options end ACTION's
    # chunk with RUN_DIR empty, and DIR is left over. A single left-over word is that RUN_DIR.
    if len(extra) == 1 and not extra[0].startswith("-") and getattr(ns, "run_dir", "") in (None, "."):
        ns.run_dir, extra = extra[0], []
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return ns


def load(args: argparse.Namespace) -> tuple[Config, Path, str]:
    run_dir = Path(args.run_dir).expanduser()
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory")
    if args.config is not None and not args.config.exists():
        raise UsageError(f"{args.config}: no such file")
    cfg, origin = resolve_config(run_dir, args.config, args.profile)
    if cfg.run_dir:
        run_dir = Path(cfg.run_dir)  # a run_dir written in the config file wins
    if getattr(args, "interval", None) is not None:
        if not args.interval > 0:  # 0, negative or NaN: said, never silently ignored
            raise UsageError(f"--interval: must be greater than 0, got {args.interval}")
        cfg = cfg.model_copy(update={"interval_s": args.interval})
    if getattr(args, "readonly", False):
        cfg = cfg.model_copy(update={"actions": cfg.actions.model_copy(update={"readonly": True})})
    return cfg, run_dir, origin


def safe_print(text: str, *, file: TextIO | None = None, json_text: bool = False) -> None:
    """Print text that may hold log content: secrets redacted (people paste what rlwatch prints), control sequences
    removed line by line. ``json_text``: a JSON document whose strings were redacted one by one already
    (:func:`rlwatch.common.redact.redacted`); redacting its text again would read ``"key": "…"`` as a secret."""
    body = "\n".join(clean_line(line) for line in (text if json_text else redact(text)).split("\n"))
    try:
        print(body, file=file or sys.stdout, flush=True)
    except BrokenPipeError:
        pass


def is_terminal(stream: TextIO | None) -> bool:
    """Whether a person may be reading ``stream``: False for a pipe, a file, and a stream that was closed at start
    (``2>&-`` leaves ``sys.stderr`` None)."""
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):  # closed
        return False


class _Waiting:
    """`report` at a terminal, over a big backlog: the diagnosis of its newest part first, then how far the rest is
    read, on stderr (stdout keeps only the report). Nothing of it when stderr is not a terminal."""

    EVERY_S = 0.25  # the progress line is rewritten at most this often

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._shown_at: float | None = None

    def first_look(self, snap: Snapshot, command: str = "report", then: str = "the full report") -> None:
        from rlwatch.export.report import first_look_text

        safe_print(first_look_text(snap, command, then), file=self.out)

    def progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._shown_at is not None and now - self._shown_at < self.EVERY_S:
            return
        self._shown_at = now
        self._write(f"\r{backlog_text(done, total)}\x1b[K")

    def close(self) -> None:
        """Clear the progress line, if one is shown (again: nothing)."""
        if self._shown_at is not None:
            self._write("\r\x1b[K")
            self._shown_at = None

    def _write(self, text: str) -> None:
        try:
            self.out.write(text)
            self.out.flush()
        except (BrokenPipeError, OSError):
            pass


def cmd_report(args: argparse.Namespace) -> int:
    from rlwatch.engine.engine import Engine
    from rlwatch.export.report import exit_code, to_json, to_text

    cfg, run_dir, _ = load(args)
    engine = Engine(cfg, run_dir)
    waiting = _Waiting(sys.stderr) if is_terminal(sys.stderr) else None
    try:
        if waiting is None:
            snap = engine.collect_once()
        else:
            snap = engine.collect_once(first_look=waiting.first_look, progress=waiting.progress)
    finally:
        if waiting is not None:
            waiting.close()
        engine.stop()
    safe_print(to_json(snap) if args.json else to_text(snap), json_text=args.json)
    return exit_code(snap)


def cmd_watch(args: argparse.Namespace) -> int:
    """The headless engine and the watchdog: prints changes, applies the policies, keeps its state file fresh."""

    from rlwatch.engine.engine import Engine
    from rlwatch.export.exporter import Exporter, ExporterError, parse_listen, start_exporter
    from rlwatch.export.stream import Partial, changes, plain, unsettled
    from rlwatch.remedy.watchdog import Watchdog, WatchdogError, plain_watchdog

    cfg, run_dir, _ = load(args)
    try:
        listen = parse_listen(args.prometheus) if args.prometheus else None
    except ExporterError as exc:
        raise UsageError(f"--prometheus {exc}") from None
    engine = Engine(cfg, run_dir, host=os.environ.get("RLWATCH_HOST") or None)
    done = threading.Event()
    streaming = threading.Event()  # the stream has started: the backlog is read
    lock = threading.Lock()
    prev: list[Snapshot | None] = [None]
    first_read: list[float] = []  # when the backlog was first seen read, while the first state record waits
    # Over a big backlog, what its newest part shows, before the complete stream starts (unless --complete-only).
    partial = None if args.complete_only else Partial()
    waiting = _Waiting(sys.stderr) if is_terminal(sys.stderr) else None
    # stdout and stderr on one terminal: a line printed while stderr's progress line is shown would run on from it
    shared_terminal = waiting is not None and is_terminal(sys.stdout)

    def show(rec: dict[str, object], text: str) -> None:
        with lock:
            safe_print(json.dumps(redacted(rec)) if args.json else text, json_text=args.json)

    def show_partial(snap: Snapshot) -> None:
        """Under ``lock``: the partial records due for ``snap``, while the complete stream has not begun. The first
        does not wait for the host's first sample (on two busy cores that came with a 19 MB backlog 43 % read, and a
        smaller one could be read whole before it): what the sources add later is a change, said a second later."""
        if partial is None or prev[0] is not None:
            return
        records = partial.records(snap)
        if records and shared_terminal and waiting is not None:
            waiting.close()  # it comes back on the next progress tick
        for rec in records:
            line = json.dumps(redacted(rec)) if args.json else plain(rec)
            if line is not None:
                safe_print(line, json_text=args.json)

    def emit(snap: Snapshot) -> None:
        if not snap.logs_read:
            # The complete stream starts once the whole backlog is read: its counts are then totals, not a part.
            with lock:
                show_partial(snap)
            return
        own = snap.watchdog
        # This watchdog's state file may not say yet that the backlog is read (written on its next round): the
        # stream waits for it, unless the file cannot be written (a full disk), when it would wait for ever.
        if own is not None and own.pid == os.getpid() and own.reading_backlog is not None and not watchdog.state_error:
            return
        missing = unsettled(snap) if prev[0] is None else []
        if missing:
            if not first_read:
                first_read.append(time.monotonic())
            if time.monotonic() - first_read[0] < FIRST_STATE_WAIT_S:
                return  # the first state record is a whole picture: the processes looked at, the server probed
        with lock:
            if prev[0] is None and shared_terminal and waiting is not None:
                waiting.close()  # the complete stream's first line must not run on from the progress line
            for rec in changes(prev[0], snap):
                if rec["type"] == "state" and missing:
                    rec["incomplete"] = missing  # not looked at yet, after waiting for them
                line = json.dumps(redacted(rec)) if args.json else plain(rec)
                if line is not None:
                    safe_print(line, json_text=args.json)
            prev[0] = snap
        streaming.set()

    def said(rec: dict[str, object]) -> None:
        show(rec, plain_watchdog(rec))
        if rec.get("type") == "watchdog" and "acting" in rec:
            # Whether this watchdog will act on the host is said to the person too, not only in the stream on stdout
            # (which may go to a file or a pipe): a watchdog that restarts processes must never do so unannounced.
            head = acting_words(rec)
            with lock:
                print(
                    f"rlwatch watch: this watchdog {head}: {clean_line(redact(str(rec.get('message') or '')))}",
                    file=sys.stderr,
                )

    notifications = _notifications(cfg, run_dir, engine.host, args.notify, args.heartbeat)
    try:
        watchdog = Watchdog(engine, emit=said, notifications=notifications)
    except WatchdogError as exc:
        engine.stop()
        raise UsageError(str(exc)) from None
    exporter: Exporter | None = None
    if listen is not None:
        try:
            exporter = start_exporter(engine.snapshot, listen[0], listen[1], extra=watchdog.extras)
        except ExporterError as exc:
            engine.stop()
            raise UsageError(f"--prometheus {exc}") from None
        show({"type": "exporter", "url": exporter.url}, f"serving Prometheus metrics at {exporter.url}")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: done.set())
    # The loops read the backlog in the background: after a night of tracebacks that takes minutes, and the
    # watchdog must be alive meanwhile (its heartbeat, systemd's start timeout, Ctrl-C); it acts once it is read.
    engine.on_snapshot(emit)
    watchdog.start()
    engine.start()
    try:
        # The stream's lock only where its lines share the terminal: a stalled reader of stdout must not stop the
        # progress line, nor keep Ctrl-C waiting on a lock.
        _wait_for_backlog(engine, done, streaming, waiting, lock if shared_terminal else threading.Lock())
        done.wait(args.duration)  # counted once the backlog is read, as the stream is
    finally:
        watchdog.stop()
        if exporter is not None:
            exporter.close()
        engine.stop()
    return 0


def _wait_for_backlog(
    engine: Engine,
    done: threading.Event,
    streaming: threading.Event,
    waiting: _Waiting | None,
    lock: threading.Lock,
) -> None:
    """Until the logs' backlog is read and the stream has started (or `watch` is told to stop). At a terminal
    (``waiting``): the diagnosis of the backlog's newest part and how far the rest is read, on stderr, written under
    ``lock``, the stream's where its partial lines go to the same terminal meanwhile."""
    shown = False
    try:
        while not done.is_set() and not streaming.is_set():
            if not engine.wait_first_look(0.1):
                continue  # the newest part first, then how far the rest is
            snap = engine.snapshot()
            if snap.logs_read:
                if waiting is not None:
                    with lock:
                        waiting.close()  # the progress line goes before the stream's first line comes
                done.wait(0.05)
                continue  # the stream starts with the next snapshot
            if waiting is not None:
                with lock:
                    if not shown and snap.preview is not None:
                        waiting.first_look(snap, "watch", "the stream of changes, and the watchdog's acting,")
                        shown = True
                    if snap.backlog is not None:
                        waiting.progress(*snap.backlog)
            done.wait(0.1)
    finally:
        if waiting is not None:
            with lock:
                waiting.close()


def _notifications(cfg: Config, run_dir: Path, host: str, cli: list[str], heartbeat: str | None) -> Notifications:
    """The targets of `watch` from the config, ``--notify`` and ``RLWATCH_NOTIFY``, each checked before it starts."""
    import re

    from rlwatch.common.textsafe import redact_url
    from rlwatch.export.notify.delivery import check_target
    from rlwatch.export.notify.notifications import Notifications
    from rlwatch.export.notify.targets import ENV, targets_from

    targets = targets_from(cfg.notify, cli, os.environ.get(ENV))
    for t in targets:
        problem = check_target(t.url)
        if problem:
            raise UsageError(f"notify: {problem}")
    if heartbeat is not None and not re.match(r"^https?://[^/\s]", heartbeat):
        raise UsageError(f"--heartbeat {redact_url(heartbeat)}: an http:// or https:// URL")
    return Notifications(targets, cfg.notify, host=host, run_dir=str(run_dir), heartbeat=heartbeat)


def cmd_notify(args: argparse.Namespace) -> int:
    """`rlwatch notify`: the targets and what the watchdog last sent; `--test [URL]` sends a test message now."""
    import socket
    import time

    from rlwatch.export.notify.notifications import send_test
    from rlwatch.export.notify.targets import ENV, targets_from
    from rlwatch.sources.watchdog_state import read_status

    run_dir = Path(args.run_dir).expanduser()
    host = os.environ.get("RLWATCH_HOST") or socket.gethostname()
    if args.test:
        error = send_test(args.test, host=host, run_dir=str(run_dir.absolute()))
        if error:
            raise NotifyFailed(error)
        safe_print("test message sent")
        return 0
    cfg, run_dir, _ = load(args)
    targets = targets_from(cfg.notify, (), os.environ.get(ENV))
    if args.test is not None:
        if not targets:
            raise UsageError("no notification target: give a URL, set RLWATCH_NOTIFY or notify.targets in the config")
        failed = 0
        for t in targets:
            error = send_test(t.url, host=host, run_dir=str(run_dir), timeout_s=cfg.notify.timeout_s)
            safe_print(f"{t.shown}: {'FAILED: ' + error if error else 'test message sent'}")
            failed += error is not None
        if failed:
            raise NotifyFailed(f"{failed} of {len(targets)} targets failed")
        return 0
    for t in targets:
        safe_print(f"target {t.shown} (from {t.min_severity} up)")
    if not targets:
        safe_print("no notification target configured (--notify URL, RLWATCH_NOTIFY, notify.targets)")
    status, _ = read_status(run_dir, time.time())
    ns = status.notify if status is not None else None
    if ns is not None:
        from rlwatch.export.report import notify_lines

        for line in notify_lines(ns, time.time()):
            safe_print(line)
    return 0


class NotifyFailed(Exception):
    """A test message did not go out: one line, exit 1."""


def cmd_service(args: argparse.Namespace) -> int:
    from rlwatch.remedy.service import install

    run_dir = Path(args.run_dir).expanduser()
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such directory")
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"{args.config}: no such file")
    config = args.config if args.config is not None else run_dir / "rlwatch.yaml"
    if os.path.lexists(config) and (why := config_distrust(config, run_dir)) is not None:
        # The service would run the watchdog, which acts on this file's policies and commands, for ever.
        raise UsageError(f"service install refused: {why}")
    try:
        done = install(run_dir, config=args.config, user=args.user, mode=args.mode, dry=args.print)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        hint = (
            ""
            if args.user or getattr(exc, "refusal", False)  # no place for the hook: not a question of rights
            else " (a system unit needs root: try --user, or --print and install it with sudo)"
        )
        raise UsageError(f"{where}cannot write: {exc.strerror or exc}{hint}") from None
    for line in done.lines:
        safe_print(line)
    return 0


def cmd_rearm(args: argparse.Namespace) -> int:
    """`rlwatch act rearm`: the running watchdog picks up a request; a stopped one's state file is edited."""
    import time

    from rlwatch.sources.watchdog_state import clear_gave_up, read_status, request_rearm

    run_dir = Path(args.run_dir).expanduser()
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such directory")
    if args.config is not None:
        _, run_dir, _ = load(args)  # a run_dir written in the config file wins
    targets: list[str] | None = args.target or None
    status, error = read_status(run_dir, time.time())
    if status is None:
        safe_print(error or f"no watchdog has run for {run_dir}: nothing to re-arm")
        return 1 if error else 0
    wanted = [g.target for g in status.gave_up if targets is None or g.target in targets]
    if targets and set(targets) - {g.target for g in status.gave_up}:
        unknown = sorted(set(targets) - {g.target for g in status.gave_up})
        safe_print(f"not given up: {', '.join(unknown)}")
    if args.dry_run:
        safe_print(f"would re-arm: {', '.join(wanted) or 'nothing (no target has given up)'}")
        return 0
    if not status.running:
        cleared, err = clear_gave_up(run_dir, targets)
        if err:
            raise UsageError(err)
        safe_print(f"re-armed: {', '.join(cleared) or 'nothing had given up'} (the watchdog is not running)")
        return 0
    err = request_rearm(run_dir, targets, time.time())
    if err:
        raise UsageError(err)
    deadline = time.monotonic() + 15.0
    while time.monotonic() < deadline:
        now_status, _ = read_status(run_dir, time.time())
        left = {g.target for g in now_status.gave_up} if now_status else set()
        if now_status is not None and not left & set(wanted):
            safe_print(f"re-armed: {', '.join(wanted) or 'nothing had given up'} (watchdog pid {status.pid})")
            return 0
        time.sleep(0.1)
    safe_print(f"asked the watchdog (pid {status.pid}) to re-arm; it has not confirmed yet")
    return 1


def cmd_sim(args: argparse.Namespace) -> int:
    from rlwatch.sim import SCENARIOS, run_sim

    if args.scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {args.scenario!r}; choose from: {', '.join(SCENARIOS)}")
    if args.speed <= 0:
        raise UsageError(f"--speed: must be greater than 0, got {args.speed}")
    return run_sim(args.scenario, args.dir, speed=args.speed, seed=args.seed)


def cmd_init(args: argparse.Namespace) -> int:
    from rlwatch.discover.describe import describe_config, dump_config
    from rlwatch.discover.discovery import discover

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: no such directory")
    cfg = discover(run_dir, args.profile)
    # Its comments quote the evidence — command lines that may carry a --hf_token — in a file others can read: they
    # pass the redaction every other exit does.
    text = "".join(
        clean_text(redact(line)) if line.lstrip().startswith("#") else line
        for line in dump_config(cfg).splitlines(keepends=True)
    )
    if args.stdout:
        safe_print(text)
        return 0
    target = run_dir / "rlwatch.yaml"
    if os.path.lexists(target) and not args.force:
        raise UsageError(f"{target}: already exists (use --force to overwrite)")
    try:  # never through a link planted at the name: a private temporary file renamed into place
        write_file(target, text.encode())
    except StateFileError as exc:
        raise UsageError(str(exc)) from None
    for line in describe_config(cfg):
        safe_print(f"  {line}")
    safe_print(f"wrote {target}")
    return 0


def format_plan(plan: ActionPlan) -> str:
    """The plan as a person confirms it: each target with pid, user, age, GPU memory, command line and why."""
    lines = [f"Plan: {plan.action}"]
    if plan.refused:
        lines.append(f"  refused: {plan.refused}")
        return "\n".join(lines)
    for t in plan.targets:
        age = human_duration(t.age_s) if t.age_s is not None else "?"
        mem = f"  gpu mem {human_bytes(t.gpu_mem_bytes)}" if t.gpu_mem_bytes else ""
        lines.append(f"  stop  pid {t.pid}  user {t.user or '?'}  age {age}{mem}  [{t.role}]")
        lines.append(f"        {' '.join(t.cmdline)[:300]}")
        if t.reason:
            lines.append(f"        why: {t.reason}")
    for t in plan.start:
        lines.append(f"  start [{t.role}] {' '.join(t.cmdline)[:300]}")
        if t.reason:
            lines.append(f"        {t.reason}")
    if not plan.targets and not plan.start:
        lines.append("  nothing to stop or start")
    lines.append("Steps:")
    lines.extend(f"  {i}. {step}" for i, step in enumerate(plan.steps, 1))
    return "\n".join(lines)


def cmd_act(args: argparse.Namespace) -> int:
    """Plan, show, confirm, execute, verify. Exit 0 when done and verified, 1 when refused, cancelled or not fixed,
    2 for a usage error (including no terminal to confirm on and no --yes)."""
    if args.action == "rearm":
        return cmd_rearm(args)
    from rlwatch.engine.engine import Engine
    from rlwatch.remedy.actions.api import Actions

    if args.pid and args.action != "kill-zombies":
        raise UsageError("--pid names GPU holders for kill-zombies only")
    cfg, run_dir, _ = load(args)
    engine = Engine(cfg, run_dir)
    try:
        actions = Actions(engine)
        prepared = actions.prepare(args.action, force=args.force, pids=args.pid)
        plan = prepared.plan
        safe_print(format_plan(plan))
        if not plan.runnable:
            return 1
        if args.dry_run:
            safe_print("dry run: nothing was done")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                raise UsageError("not on a terminal: confirm with --yes (or look first with --dry-run)")
            try:
                answer = input("Proceed? [y/N] ").strip().lower()
            except EOFError:
                answer = ""
            if answer not in ("y", "yes"):
                safe_print("cancelled: nothing was done")
                return 1
        result = actions.execute(prepared, progress=lambda msg: safe_print(f"  … {msg}"))
        for line in result.details:
            safe_print(f"  {line}")
        safe_print(result.message)
        return 0 if result.ok else 1
    finally:
        engine.stop()


Handler = Callable[[argparse.Namespace], int]

HANDLERS: dict[str, Handler] = {
    "act": cmd_act,
    "report": cmd_report,
    "watch": cmd_watch,
    "sim": cmd_sim,
    "init": cmd_init,
    "service": cmd_service,
    "notify": cmd_notify,
}


def acting_words(rec: Mapping[str, object]) -> str:
    """What a watchdog's start record means for the host: it acts only holding the run's lock with a policy."""
    if rec.get("acting") and rec.get("policies") == 0:
        return "takes no action (no remediation policy is enabled)"
    return "ACTS on this run" if rec.get("acting") else "only watches (it takes no action)"


# The commands that read a run directory (and may act on it): as root on another user's run they work as that user.
# `service` is not among them (root writes its own unit or hook, outside the run), nor `sim`, `demo` and `fleet`.
ON_A_RUN = frozenset({"dashboard", "report", "watch", "act", "init", "notify", "snapshot"})


def run(args: argparse.Namespace, handlers: Mapping[str, Handler] = HANDLERS) -> int:
    """Run a command (by default the headless ones); turns user mistakes into one line and exit 2.

    As root on a run another user controls, the command runs in a child working as that user, before anything of
    the run is read (:mod:`rlwatch.discover.privsep`); it says so first, on standard error."""
    run_dir = getattr(args, "run_dir", None)
    if args.command in ON_A_RUN and not getattr(args, "demo", False) and run_dir is not None:
        path = Path(run_dir).expanduser()
        if path.is_dir():
            real = os.path.realpath(path)  # the directory judged, whatever a link at the path leads to later

            def as_owner(said: str) -> int:
                print(f"rlwatch: {clean_line(said)}", file=sys.stderr)
                args.run_dir = real
                return _dispatch(args, handlers)

            code = run_as_owner(Path(real), as_owner)
            if code is not None:
                return code
    return _dispatch(args, handlers)


def cmd_fleet_json(args: argparse.Namespace) -> int:
    """``fleet --json``: the fleet read once, each distributed job joined across its hosts into one verdict (which
    node's which rank the others wait for, in which collective), for scripts; exit 1 when a job is hung."""
    from rlwatch.common.trust import config_distrust
    from rlwatch.config.models import FleetConfig
    from rlwatch.discover.load import load_config
    from rlwatch.export.fleet import FleetError, make_fleet_source
    from rlwatch.export.fleet.job import join_jobs

    cfg = FleetConfig()
    if args.config is not None:
        if not args.config.exists():
            raise UsageError(f"{args.config}: no such file")
        cfg = load_config(args.config).fleet
        if config_distrust(args.config, args.config.parent) is not None:
            cfg = cfg.model_copy(update={"prometheus": None, "exporters": []})
    if args.prometheus:
        cfg = cfg.model_copy(update={"prometheus": args.prometheus})
    if not cfg.prometheus and not cfg.exporters:
        raise UsageError("fleet: give --prometheus URL, or --config FILE with fleet.prometheus or fleet.exporters")
    try:
        snap = make_fleet_source(cfg).read()
    except FleetError as exc:
        raise UsageError(f"fleet: {exc}") from None
    jobs = join_jobs(snap.hosts)
    out = {
        "time": snap.time,
        "source": snap.source,
        "error": snap.error,
        "jobs": [v.as_dict() for v in jobs],
        "hosts": [
            {
                "host": h.name,
                "target": h.key,
                "status": h.status.value,
                "age_s": h.age_s,
                "job": h.run_job,
                "node_rank": h.node_rank,
                "ranks": [
                    {
                        "rank": r.rank,
                        "local_rank": r.local_rank,
                        "state": r.state,
                        "where": r.where,
                        "wait": r.wait,
                        "still_s": r.still_s,
                        "collective_seq": r.collective_seq,
                    }
                    for r in h.ranks
                ],
                "worst": h.worst.code if h.worst else None,
            }
            for h in snap.hosts
        ],
    }
    print(json.dumps(out, indent=2))
    return 1 if any(v.state == "hung" for v in jobs) else 0


def _dispatch(args: argparse.Namespace, handlers: Mapping[str, Handler]) -> int:
    if args.command == "fleet" and getattr(args, "json", False):
        handlers = {**handlers, "fleet": cmd_fleet_json}
    try:
        return handlers[args.command](args)
    except ConfigError as exc:
        for mistake in exc.every():  # every mistake of the file, one line each: not one fix and run per mistake
            print(f"rlwatch: {mistake}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"rlwatch: {exc}", file=sys.stderr)
        return 2
    except SeveralRuns as exc:
        # Not one run: say so, and how to watch each (one line, as every mistake; the runs listed after it).
        print(f"rlwatch: {clean_line(str(exc.run_dir))} holds {len(exc.runs)} separate runs, not one:", file=sys.stderr)
        for path, what in exc.runs:
            print(f"  rlwatch {clean_line(str(path))}    ({what})", file=sys.stderr)
        return 2
    except NotifyFailed as exc:
        print(f"rlwatch: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m rlwatch`: the headless commands only (the `rlwatch` script adds the dashboard)."""
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.command not in HANDLERS:
        print(f"rlwatch: '{args.command}' needs the dashboard; run it with the rlwatch command", file=sys.stderr)
        return 2
    return run(args)
