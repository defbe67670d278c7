"""The `rlwatch` console script: the headless commands of the core plus the dashboard ones.

It lives outside the core so that `rlwatch/` never imports Textual; Textual is imported only when a dashboard
command actually runs, so `rlwatch report` starts fast and works where Textual would not.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlwatch.cli import HANDLERS, UsageError, is_terminal, load, parse, run
from rlwatch.common.redact import clean_text, redact_lines, redacted
from rlwatch.common.statefiles import StateFileError, write_file
from rlwatch.discover.discovery import SeveralRuns
from rlwatch.discover.load import resolve_config
from rlwatch.engine.engine import IDLE_SAMPLE_S, STOPPED_SAMPLE_S, Engine
from rlwatch.engine.feed import StaticFeed

if TYPE_CHECKING:
    from textual.app import App

    from rlwatch.config.models import Config

DEMO_SPEED = 20.0  # a snapshot's simulated run goes this many times faster than a real one
EXIT_GRACE_S = 3.0  # how long a dashboard asked to exit by a signal may take before it is made to
FIRST_LOOK_HOLD_S = 0.5  # at most this long the first frame waits, once Textual is loaded, for the diagnosis of now


def _parse_size(text: str) -> tuple[int, int]:
    try:
        cols, rows = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"--size: expected COLSxROWS like 120x40, got {text!r}") from None
    if not (20 <= cols <= 500 and 10 <= rows <= 300):
        raise UsageError(f"--size: {cols}x{rows} is out of range (20..500 x 10..300)")
    return cols, rows


@contextmanager
def simulated_host(scenario: str, speed: float, *, settle_s: float = 0.0) -> Iterator[Path]:
    """Run `rlwatch sim` in a temporary directory for the duration of the block, then stop and remove it all."""
    from rlwatch.sim import SCENARIOS

    if scenario not in SCENARIOS:
        raise UsageError(f"unknown scenario {scenario!r}; choose from: {', '.join(SCENARIOS)}")
    tmp = Path(tempfile.mkdtemp(prefix=f"rlwatch-demo-{scenario}-"))
    run_dir = tmp / "run"
    errors = tmp / "sim.stderr"
    with errors.open("wb") as err_out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rlwatch.sim", scenario, str(run_dir), "--speed", str(speed)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err_out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 20
        while not (run_dir / ".sim" / "ledger.json").exists():  # written last; some scenarios have no rlwatch.yaml
            if proc.poll() is not None:
                err = errors.read_text(errors="replace").strip().splitlines()
                raise UsageError(f"the simulator exited early: {err[-1] if err else proc.returncode}")
            if time.monotonic() > deadline:
                raise UsageError("the simulator did not start within 20 s")
            time.sleep(0.05)
        if settle_s:
            _wait_settled(run_dir, settle_s)
        yield run_dir
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def _wait_settled(run_dir: Path, timeout: float) -> None:
    from rlwatch.sim.ledger import incident_shown, read_ledger

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = read_ledger(run_dir)
        if data is not None and incident_shown(data):
            return
        time.sleep(0.1)


def need_terminal() -> None:
    """A dashboard without a terminal would paint escape codes into a file for ever: say so and stop instead."""
    if not is_terminal(sys.stdin) or not is_terminal(sys.__stderr__):
        raise UsageError("the dashboard needs a terminal; without one use 'rlwatch report' or 'rlwatch watch'")


def run_app(app: App[Any]) -> None:
    """Run a Textual app so that SIGTERM, SIGHUP (a closed terminal) and SIGINT end it like 'q'.

    The app is asked to exit, which puts the terminal back. When the terminal is gone (an SSH session that
    dropped) Textual can block for ever writing to it, so if the app has not ended a moment later the signal is
    delivered again, and the second time it raises SystemExit: that unwinds through the callers' cleanup, which
    stops the engine and any simulator, instead of leaving them running with nobody watching.
    """
    import asyncio  # here, not at the top: the engine starts (and its line counts) before this costs 50 ms

    loop = asyncio.new_event_loop()
    main = threading.get_ident()
    timers: list[threading.Timer] = []

    def on_signal(signum: int, frame: object) -> None:
        if timers:
            raise SystemExit(0)
        loop.call_soon_threadsafe(app.exit)
        timer = threading.Timer(EXIT_GRACE_S, signal.pthread_kill, (main, signum))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        app.run(loop=loop)
    finally:
        for timer in timers:
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        loop.close()


def run_dashboard(engine: Engine) -> int:
    # The first frame must not wait for a backlog of gigabytes: the engine's log loop reads it while the
    # dashboard is already up, and the counts fill in as it goes. The engine starts before the dashboard is
    # imported, so that its first round of the sources, and the line counts of diagnosis first on the other cores,
    # run while Textual loads. While nothing of the run moves, the sources are read less often (engine: _next_round).
    engine.idle_sample_s = max(IDLE_SAMPLE_S, engine.cfg.interval_s)
    engine.stopped_sample_s = max(STOPPED_SAMPLE_S, engine.cfg.interval_s)
    engine.start()
    from rlwatch.live import LiveFeed  # the actions API and Textual: not needed before the engine runs
    from rlwatch.tui.app import RlwatchApp

    # The diagnosis of a big backlog's newest part is counted while Textual loads; when it is not out yet, the
    # first frame waits for it a little (never long: from a cold page cache its line numbers take seconds).
    engine.wait_first_look(FIRST_LOOK_HOLD_S)
    try:
        run_app(RlwatchApp(LiveFeed(engine)))
    finally:
        engine.stop()
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        cfg, run_dir, _ = load(args)
    except SeveralRuns as exc:
        # A directory of several runs: at a terminal the person picks one (tui/screens/runs.py); elsewhere the
        # runs are listed, one line each (rlwatch.cli). Leaving the list (q) watches none.
        if not (is_terminal(sys.stdin) and is_terminal(sys.__stderr__)):
            raise
        chosen = choose_run(exc)
        if chosen is None:
            return 0
        cfg, run_dir, _ = load(argparse.Namespace(**{**vars(args), "run_dir": str(chosen)}))
    need_terminal()
    return run_dashboard(Engine(cfg, run_dir))


def choose_run(exc: SeveralRuns) -> Path | None:
    """The run the person picks from the ones ``exc`` lists, or None when they leave the list."""
    from rlwatch.tui.screens.runs import ChooseRunApp

    app = ChooseRunApp(exc.run_dir, exc.runs)
    run_app(app)
    return app.return_value


def demo_config(run_dir: Path, speed: float) -> Config:
    """The config a demo of a simulated run watches it with. A scenario without rlwatch.yaml is found from evidence,
    as on a real host, and is as simulated as any other; its time runs ``speed`` times faster, so the windows that
    are durations of the run (a hang's floor, the start-up allowance) are shortened by the same factor, as the
    simulator's own rlwatch.yaml shortens them for the other scenarios."""
    cfg, _ = resolve_config(run_dir, None, "auto")
    update: dict[str, Any] = {"simulated": True}
    if not (run_dir / "rlwatch.yaml").exists():
        th = cfg.thresholds
        update["thresholds"] = th.model_copy(
            update={"hang_floor_s": max(3.0, th.hang_floor_s / speed), "startup_s": max(30.0, th.startup_s / speed)}
        )
    return cfg.model_copy(update=update)


def cmd_demo(args: argparse.Namespace) -> int:
    need_terminal()
    with simulated_host(args.scenario, args.speed) as run_dir:
        cfg = demo_config(run_dir, args.speed)
        if args.readonly:
            cfg = cfg.model_copy(update={"actions": cfg.actions.model_copy(update={"readonly": True})})
        return run_dashboard(Engine(cfg, run_dir))


def _feed(run_dir: Path, cfg: Config, warmup_s: float, settle_s: float = 0.0) -> StaticFeed:
    """One moment of the run, fixed: what every size of a snapshot renders. With ``settle_s`` (a demo's simulated
    run, whose incident has played out), the moment waits up to that long for the run's state to be known: a hang
    is only a hang once its window of silence is past."""
    cfg = cfg.model_copy(update={"interval_s": min(cfg.interval_s, 0.25)})
    engine = Engine(cfg, run_dir)
    try:
        engine.collect_once()
        if warmup_s:
            engine.start()
            time.sleep(warmup_s)  # gather a few samples so the graphs have a history
        snap = engine.build()
        deadline = time.monotonic() + settle_s
        while snap.run_state is not None and snap.run_state.state == "unknown" and time.monotonic() < deadline:
            time.sleep(cfg.interval_s)
            snap = engine.build()
        # A snapshot is for others (people attach it to issues): what it shows is redacted, as every exit's is.
        lines = engine.lines_after(0)
        texts = redact_lines([line.text for line in lines])
        shown = [dataclasses.replace(line, text=clean_text(text)) for line, text in zip(lines, texts, strict=True)]
        return StaticFeed(redacted(snap), shown, readonly=cfg.actions.readonly)
    finally:
        engine.stop()


def cmd_snapshot(args: argparse.Namespace) -> int:
    from rlwatch.tui.snapshot import render_svg

    sizes = [_parse_size(part) for part in args.size.split(",")]
    if args.demo == (args.run_dir is not None):
        raise UsageError("snapshot: give either RUN_DIR or --demo")
    many = len(sizes) > 1
    if many and "{size}" not in str(args.out):
        raise UsageError("snapshot: with several sizes, --out must hold {size} (e.g. shots/{size}/x.svg)")
    outs = [Path(str(args.out).replace("{size}", f"{c}x{r}")) for c, r in sizes]
    # Checked first, and never created: a mistyped directory is a mistake to say, not a tree to make.
    for out in outs:
        if not out.parent.is_dir():
            raise UsageError(f"{out}: no such directory: {out.parent}")
    if args.demo:
        with simulated_host(args.scenario, DEMO_SPEED, settle_s=30) as run_dir:
            feed = _feed(run_dir, demo_config(run_dir, DEMO_SPEED), warmup_s=2.0, settle_s=10.0)
    else:
        run_dir = Path(args.run_dir)
        if not run_dir.is_dir():
            raise UsageError(f"{run_dir}: no such directory")
        feed = _feed(run_dir, resolve_config(run_dir, args.config, args.profile)[0], warmup_s=0.0)
    for out, size in zip(outs, sizes, strict=True):
        try:  # never through a link planted at the name
            write_file(out, render_svg(feed, size=size).encode())
        except StateFileError as exc:
            raise UsageError(str(exc)) from None
        print(f"wrote {out}")
    return 0


def cmd_fleet(args: argparse.Namespace) -> int:
    from rlwatch.common.trust import config_distrust
    from rlwatch.config.models import FleetConfig
    from rlwatch.discover.load import load_config
    from rlwatch.export.fleet import FleetError, make_fleet_source
    from rlwatch.tui.fleet import FleetApp

    cfg = FleetConfig()
    distrust: str | None = None
    if args.config is not None:
        if not args.config.exists():
            raise UsageError(f"{args.config}: no such file")
        cfg = load_config(args.config).fleet
        distrust = config_distrust(args.config, args.config.parent)
        if distrust is not None:  # another user's file names no URL for this user's rlwatch to fetch
            cfg = cfg.model_copy(update={"prometheus": None, "exporters": []})
    if args.prometheus:
        cfg = cfg.model_copy(update={"prometheus": args.prometheus})
    if not cfg.prometheus and not cfg.exporters:
        if distrust is not None:
            raise UsageError(f"fleet: {distrust.replace('actions are off', 'nothing it names is fetched')}")
        raise UsageError("fleet: give --prometheus URL, or --config FILE with fleet.prometheus or fleet.exporters")
    try:
        source = make_fleet_source(cfg)
    except FleetError as exc:
        raise UsageError(f"fleet: {exc}") from None
    need_terminal()
    run_app(FleetApp(source.read, refresh_s=cfg.refresh_s))
    return 0


DASHBOARD_HANDLERS = {"dashboard": cmd_dashboard, "demo": cmd_demo, "snapshot": cmd_snapshot, "fleet": cmd_fleet}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    return run(args, {**HANDLERS, **DASHBOARD_HANDLERS})
