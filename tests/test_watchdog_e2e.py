"""The watchdog end to end: the real `python -m rlwatch watch DIR --json` against the simulator's incidents.

memory-leak: the leaking worker is restarted when its brake streak reaches 10, and its memory comes back.
server-crash: the run is resumed (its launcher brings the server back with it), stepping past the resume step.
crash loop: a policy that keeps firing spends the budget, the watchdog gives up (a critical finding in
`rlwatch report --json`), does nothing more, and acts again once `rlwatch act rearm` re-arms it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from tests.simhost import Sim, piece, report, start, wait_until

pytestmark = pytest.mark.slow

Record = dict[str, Any]


class Watch:
    """One `rlwatch watch --json` process started by a test; its records collected as they are printed."""

    def __init__(self, run_dir: Path, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlwatch", "watch", str(run_dir), "--json", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.records.append(json.loads(line))

    def all(self, pred: Callable[[Record], bool]) -> list[Record]:
        with self._lock:
            return [r for r in self.records if pred(r)]

    def wait(self, pred: Callable[[Record], bool], timeout: float = 60) -> Record:
        found: list[Record] = wait_until(lambda: self.all(pred), timeout)
        return found[0]

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=30) == 0
        self._reader.join(timeout=5)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.fixture
def watches() -> Iterator[list[Watch]]:
    started: list[Watch] = []
    yield started
    for w in started:  # a failed assertion must not leave a watchdog acting on the next test's run
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def is_action(action: str, key: str | None = None) -> Callable[[Record], bool]:
    return lambda r: r["type"] == "action" and r["action"] == action and (key is None or r["key"] == key)


def audit(run_dir: Path) -> list[Record]:
    return [json.loads(line) for line in (run_dir / ".rlwatch" / "audit.jsonl").read_text().splitlines()]


def test_memory_leak_the_braking_worker_is_restarted_and_its_memory_comes_back(
    tmp_path: Path, sims: list[Sim], watches: list[Watch]
) -> None:
    sim = start(sims, tmp_path, "memory-leak", 20)
    watch = Watch(sim.dir)
    watches.append(watch)
    fired = watch.wait(lambda r: r["type"] == "policy" and r["decision"] == "act")
    streak = re.fullmatch(r"emergency_brake (\d+) times in a row in (worker-\d)\.log", fired["reason"])
    assert streak is not None and int(streak.group(1)) >= 10, fired["reason"]
    name = streak.group(2)
    assert fired["key"] == f"restart-workers:{name}" and fired["target"] == name

    done = watch.wait(is_action("restart-workers", fired["key"]))
    assert done["ok"] is True, done["message"]
    new_pid = int(re.search(rf"started {name} as pid (\d+)", " ".join(done["details"])).group(1))  # type: ignore[union-attr]
    was = re.search(r"RSS (\d+) MB \(was (\d+) MB\)", done["message"])
    assert was is not None and int(was.group(2)) > 150  # the leaked worker, measured before it was stopped
    assert psutil.Process(new_pid).memory_info().rss < 100 * 1024**2  # the restarted one starts fresh
    # The stream tells the worker gone — when it had begun before the restart: it starts once the backlog is read
    # and this watchdog's state file says so, which on a loaded machine can come after the watchdog acted. It tells
    # it on its next snapshot, which may come after the watchdog's own record of the action: waited for.
    order = [r["type"] for r in watch.all(lambda r: r["type"] in ("state", "policy"))]
    if order and order[0] == "state":
        watch.wait(lambda r: r["type"] == "process_gone" and r["name"] == name)

    rep = report(sim.dir)
    assert rep["watchdog"]["running"] is True and rep["watchdog"]["pid"] == watch.proc.pid
    assert rep["watchdog"]["last_action"].startswith("restart-workers: done")
    assert "expected_missing" not in {f["code"] for f in rep["findings"]}  # the expected watchdog runs
    signals = [r for r in audit(sim.dir) if r["action"] == "restart-workers" and r["event"] == "signal"]
    assert signals and all(r["rlwatch_pid"] == watch.proc.pid for r in signals)
    watch.stop()
    sim.stop()


def test_server_crash_resume_brings_back_one_server_and_training_passes_the_resume_step(
    tmp_path: Path, sims: list[Sim], watches: list[Watch]
) -> None:
    sim = start(sims, tmp_path, "server-crash", 20)
    watch = Watch(sim.dir)
    watches.append(watch)
    fired = watch.wait(lambda r: r["type"] == "policy" and r["decision"] == "act", 90)
    assert fired["key"] == "restart-server+resume" and fired["reason"].startswith("inference server down")
    # The launcher started the server, and starts one again when resume runs it: a server restarted while the
    # trainer still lived is stopped by the resume, one restarted once the trainer is gone is not started at all
    # (either way no second server on the same GPU).
    restarted = watch.wait(is_action("restart-server"), 90)
    resumed = watch.wait(is_action("resume"), 90)
    if restarted["skipped"]:  # the launcher starts the server: known from its parent, or (first looked at after
        # the server was gone, as on a loaded machine) from the run's launcher rule
        said = ("the launcher started this server", "launcher starts a server of its own")
        assert any(s in restarted["message"] for s in said), restarted["message"]
    else:  # the trainer still lived when the server was restarted: the resume stops that server
        pid = re.search(r"server pid (\d+)", restarted["message"]).group(1)  # type: ignore[union-attr]
        assert any(d.startswith(f"server (pid {pid})") for d in resumed["details"]), resumed["details"]
    assert resumed["ok"] is True, resumed["message"]
    past = re.search(r"past resume step (\d+)", resumed["message"])
    assert past is not None
    resume_step = int(past.group(1))
    watch.wait(lambda r: r["type"] == "step" and r["step"] > resume_step + 2, 90)
    rep = report(sim.dir)
    assert rep["server"]["up"] is True
    assert len([p for p in rep["processes"] if p["role"] == "server" and p["alive"]]) == 1, rep["processes"]
    assert rep["training"]["last_step"] > resume_step
    assert not {"server_down", "connection_refused"} & {f["code"] for f in rep["findings"]}
    data = sim.wait(lambda d: (d["facts"]["trainer_last_step"] or 0) > resume_step)
    assert piece(data, "trainer")["alive"] or data["facts"]["trainer_last_step"] + 1 >= data["facts"]["total_steps"]
    watch.stop()
    sim.stop()


def test_crash_loop_spends_the_budget_gives_up_and_acts_again_only_when_rearmed(
    tmp_path: Path, sims: list[Sim], watches: list[Watch]
) -> None:
    sim = start(sims, tmp_path, "memory-leak", 20)
    cfg = sim.rlwatch_yaml()
    cfg["policies"] = [
        {"name": "loop", "when": {"event": "emergency_brake", "streak": 3}, "actions": ["restart-workers"]}
    ]
    cfg["watchdog"]["budget"] = {"burst": 2, "window_s": 600, "delay_s": 0.2, "startup_s": 0.2, "reset_after_s": 600}
    config = tmp_path / "loop.yaml"
    config.write_text(yaml.safe_dump(cfg))
    watch = Watch(sim.dir, "--config", str(config))
    watches.append(watch)

    gave = watch.wait(lambda r: r["type"] == "gave_up", 90)
    key, name = gave["key"], gave["target"]
    assert gave["reason"].startswith("2 restarts in") and gave["severity"] == "critical"
    assert len(watch.all(is_action("restart-workers", key))) == 2

    rep = report(sim.dir)
    finding = next(f for f in rep["findings"] if f["code"] == "watchdog_gave_up" and key in f["message"])
    assert finding["severity"] == "critical" and "rlwatch act rearm" in finding["message"]
    assert key in {g["target"] for g in rep["watchdog"]["gave_up"]}

    # The worker goes on braking until it idles at its limit: the condition holds, and nothing is done.
    sim.wait(lambda d: piece(d, name)["state"] == "idle", 60)
    wait_until(lambda: report(sim.dir)["events"]["emergency_brake"]["streak"] >= 12, 30)
    assert len(watch.all(is_action("restart-workers", key))) == 2
    assert len([r for r in audit(sim.dir) if r["event"] == "spawn" and r.get("target") == name]) == 2

    out = subprocess.run(
        [sys.executable, "-m", "rlwatch", "act", "rearm", str(sim.dir), "--target", key],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == f"re-armed: {key} (watchdog pid {watch.proc.pid})"
    assert watch.wait(lambda r: r["type"] == "rearmed")["targets"] == [key]
    again = watch.wait(lambda r: is_action("restart-workers", key)(r) and r["time"] >= gave["time"], 60)
    assert len(watch.all(is_action("restart-workers", key))) == 3 and again["ok"] is True
    watch.stop()
    sim.stop()
