"""The security review's findings, re-tried as written through the real command line, each refused or redacted.

1. root runs a command from a config another user wrote; 3. a link another user planted is followed to a file
that user cannot read; 4. an action stops first and finds out after that it cannot start; 5. escape sequences in
`report --json`. (2, secrets, is tests/test_secrets_exits.py.) Files are given to ``nobody`` with chown: ownership
is what rlwatch reads, so that is the attack as the kernel presents it.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.simhost import rlwatch, wait_until

try:
    NOBODY = pwd.getpwnam("nobody").pw_uid
except KeyError:  # pragma: no cover
    NOBODY = None

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or NOBODY is None, reason="needs root, as rlwatch so often runs"),
]
# A worker writes its log (argv[2], else worker.log in its working directory): what makes it its run's.
WORKER = (
    "import sys, time; log = open(sys.argv[2] if len(sys.argv) > 2 else 'worker.log', 'a'); "
    "print('up', file=log, flush=True); time.sleep(300)"
)


def _worker(
    run: Path, started: list[subprocess.Popen[bytes]], cwd: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    marker = f"trust-worker-{uuid.uuid4().hex[:12]}"
    log = run / "worker.log"  # wherever it works, it writes its run's log
    proc = subprocess.Popen([sys.executable, "-c", WORKER, marker, str(log)], cwd=cwd or run, start_new_session=True)
    started.append(proc)
    wait_until(log.exists, 30)
    return proc, marker


def _config(run: Path, marker: str, command: list[str] | None = None, **extra: object) -> Path:
    rule: dict[str, object] = {"role": "worker", "cmdline_regex": marker}
    if command:
        rule["command"] = command
    cfg = {"profile": "workers", "gpu": {"backend": "none"}, "interval_s": 0.2, "processes": [rule]}
    cfg["actions"] = {"grace_s": 2, "verify_timeout_s": 20}
    cfg.update(extra)
    path = run / "rlwatch.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _signalled(run: Path) -> list[dict[str, object]]:
    audit = run / ".rlwatch" / "audit.jsonl"
    if not audit.exists():
        return []
    return [r for r in map(json.loads, audit.read_text().splitlines()) if r["event"] in ("signal", "spawn")]


def test_roots_actions_refuse_a_config_another_user_wrote(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Finding 1 as written: a 1777 run directory, a root worker running, ``nobody``'s rlwatch.yaml whose worker
    command runs ``id > FILE``; `act restart-workers --yes` as root."""
    run = tmp_path / "run"
    run.mkdir(mode=0o1777)
    os.chmod(run, 0o1777)
    worker, marker = _worker(run, started)
    pwned = tmp_path / "pwned"
    config = _config(run, marker, command=["sh", "-c", f"id > {pwned}"])
    os.chown(config, NOBODY, -1)

    for flags in (["--dry-run"], ["--yes"]):
        out = rlwatch("act", "restart-workers", str(run), *flags)
        said = out.stdout + out.stderr
        assert out.returncode != 0, said
        assert f"the configuration {config} is not trusted: {config} is owned by uid {NOBODY}" in said
        assert "actions are off (monitoring goes on)" in said
    assert worker.poll() is None and not pwned.exists() and _signalled(run) == []

    report = json.loads(rlwatch("report", str(run), "--json").stdout)  # monitoring goes on, and says why no action
    off = [f for f in report["findings"] if f["code"] == "actions_off"]
    assert off and str(config) in off[0]["message"] and "chmod go-w" in off[0]["message"]
    assert any(p["pid"] == worker.pid for p in report["processes"])
    service = rlwatch("service", "install", str(run), "--print")
    assert service.returncode == 2 and "service install refused: the configuration" in service.stderr

    os.chown(config, 0, -1)  # root's own file, in a sticky directory nobody else can rename it in: trusted ...
    plan = rlwatch("act", "restart-workers", str(run), "--dry-run")
    said = plan.stdout + plan.stderr
    assert "not trusted" not in said  # ... and what still refuses is starting a worker in a directory all can write
    assert f"working directory {run} is writable by others (mode 1777)" in said, said


@pytest.mark.parametrize("how", ["group-writable", "under-a-directory-others-can-write", "--config-elsewhere"])
def test_other_untrusted_configs_refuse_too(tmp_path: Path, started: list[subprocess.Popen[bytes]], how: str) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    worker, marker = _worker(run, started)
    config = _config(run, marker, command=[sys.executable, "-c", WORKER, marker])
    args = ["act", "restart-workers", str(run), "--yes"]
    if how == "group-writable":
        os.chmod(config, 0o664)
    elif how == "under-a-directory-others-can-write":
        os.chmod(run, 0o777)
    else:
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o777)
        moved = shared / "rlwatch.yaml"
        config.rename(moved)
        args += ["--config", str(moved)]
    out = rlwatch(*args)
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "is not trusted" in said and "writable by group or others" in said, said
    assert worker.poll() is None and _signalled(run) == []


def test_an_untrusted_config_sends_nothing_anywhere(tmp_path: Path) -> None:
    """An untrusted file still says how to watch, but not where rlwatch sends what it sees."""
    run = tmp_path / "run"
    run.mkdir(mode=0o1777)
    os.chmod(run, 0o1777)
    secret = tmp_path / "root-only.txt"
    secret.write_text("Traceback (most recent call last):\nRuntimeError: TOP-SECRET-CONTENT\n")
    os.chmod(secret, 0o600)
    config = run / "rlwatch.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "gpu": {"backend": "none"},
                "training": {"logs": [str(secret), "*.log"]},
                "notify": {
                    "targets": [{"url": "json://attacker.invalid/hook"}],
                    "heartbeat": "http://attacker.invalid/",
                },
            }
        )
    )
    os.chown(config, NOBODY, -1)
    (run / "train.log").write_text("step 1 done\n")
    out = rlwatch("report", str(run), "--json")
    report = json.loads(out.stdout)
    assert "TOP-SECRET-CONTENT" not in out.stdout
    assert report["watchdog"] is None or not (report["watchdog"].get("notify") or {}).get("targets")
    notify = rlwatch("notify", str(run))
    assert "attacker" not in notify.stdout + notify.stderr


@pytest.mark.parametrize("configured", [False, True])
def test_a_planted_link_to_a_root_only_file_is_not_read(tmp_path: Path, configured: bool) -> None:
    """Finding 3 as written: `nobody` links train.log in a 1777 run directory to a root-only file."""
    run = tmp_path / "run"
    run.mkdir(mode=0o1777)
    os.chmod(run, 0o1777)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    secret = private / "credentials.log"
    secret.write_text("Traceback (most recent call last):\nRuntimeError: TOP-SECRET-CONTENT\n")
    os.chmod(secret, 0o600)
    (run / "worker.log").write_text("step 3 done\n")
    link = run / "train.log"
    link.symlink_to(secret)
    os.lchown(link, NOBODY, -1)
    if configured:
        (run / "rlwatch.yaml").write_text("gpu: {backend: none}\ntraining: {logs: ['*.log']}\n")
    out = rlwatch("report", str(run))
    js = rlwatch("report", str(run), "--json")
    assert "TOP-SECRET-CONTENT" not in out.stdout + out.stderr + js.stdout
    assert f"{link} is a symbolic link of uid {NOBODY}" in out.stdout and "not followed" in out.stdout, out.stdout
    os.lchown(link, 0, -1)  # root's own link: followed (whoever made it could read the file anyway)
    again = rlwatch("report", str(run))
    assert "TOP-SECRET-CONTENT" in again.stdout


def test_an_action_checks_what_it_needs_before_its_first_signal(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Finding 4 as written: the state directory not trusted; before, the worker was stopped and left down."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    worker, marker = _worker(run, started)
    _config(run, marker)  # no command: the recorded one (the launch book, in .rlwatch/) is needed to start it again
    state = run / ".rlwatch"
    state.mkdir(mode=0o700)
    os.chown(state, NOBODY, -1)
    for flags in (["--dry-run"], ["--yes"]):
        out = rlwatch("act", "restart-workers", str(run), *flags)
        said = out.stdout + out.stderr
        assert out.returncode != 0 and f"{state} is owned by uid {NOBODY}" in said, said
    assert worker.poll() is None


@pytest.mark.parametrize("problem", ["no-such-program", "working-directory-others-can-write", "log-a-planted-link"])
def test_a_start_that_cannot_happen_stops_nothing(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], problem: str
) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    cwd = run
    command: list[str] | None = None
    log = None
    if problem == "no-such-program":
        command = [str(tmp_path / "gone" / "python3"), "worker.py"]
    elif problem == "working-directory-others-can-write":
        cwd = tmp_path / "open"
        cwd.mkdir()
        os.chmod(cwd, 0o777)
    else:
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o1777)
        log = shared / "worker.out"
        log.symlink_to("/etc/passwd")
        os.lchown(log, NOBODY, -1)
    worker, marker = _worker(run, started, cwd=cwd)
    extra = {
        "processes": [
            {
                "role": "worker",
                "cmdline_regex": marker,
                **({"command": command} if command else {}),
                **({"log": str(log)} if log else {}),
            }
        ]
    }
    _config(run, marker, **extra)
    out = rlwatch("act", "restart-workers", str(run), "--dry-run")
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "could not be started again, so nothing is stopped" in said, said
    yes = rlwatch("act", "restart-workers", str(run), "--yes")
    assert yes.returncode != 0 and worker.poll() is None and _signalled(run) == []


def test_report_json_strings_carry_no_escape_sequences(tmp_path: Path) -> None:
    """Finding 5: a `jq -r` of a field writes it to a terminal."""
    (tmp_path / "train.log").write_text(
        "Traceback (most recent call last):\n"
        '  File "t.py", line 1, in <module>\n'
        "RuntimeError: bad \x1b]52;c;ZWNobyBwd25lZA==\x07 state \x1b[2J\x1b[31mred\x1b[0m\n"
    )
    out = rlwatch("report", str(tmp_path), "--json")
    assert "\\u001b" not in out.stdout and "\\u0007" not in out.stdout and "\x1b" not in out.stdout
    assert "RuntimeError: bad  state red" in out.stdout


def test_a_worker_of_another_run_matching_the_rule_is_never_touched(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """A role's pattern names a role; it does not make a process this run's. Two runs on one host, the same worker
    script: restart-workers of this run plans this run's worker only, and refuses when only the other's is there."""
    run, other = tmp_path / "run", tmp_path / "other-run"
    run.mkdir()
    other.mkdir()
    marker = f"shared-worker-{uuid.uuid4().hex[:8]}"
    theirs = subprocess.Popen([sys.executable, "-c", WORKER, marker], cwd=other, start_new_session=True)
    started.append(theirs)
    wait_until(lambda: (other / "worker.log").exists(), 30)
    _config(run, marker, command=[sys.executable, "-c", WORKER, marker])
    alone = rlwatch("act", "restart-workers", str(run), "--dry-run")
    said = alone.stdout + alone.stderr
    assert alone.returncode != 0 and f"(pid {theirs.pid}) matches the worker rule but shows no evidence" in said, said
    ours = subprocess.Popen([sys.executable, "-c", WORKER, marker], cwd=run, start_new_session=True)
    started.append(ours)
    wait_until(lambda: (run / "worker.log").exists(), 30)
    plan = rlwatch("act", "restart-workers", str(run), "--dry-run")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert f"pid {ours.pid}" in plan.stdout and f"pid {theirs.pid}" not in plan.stdout, plan.stdout
    assert theirs.poll() is None and ours.poll() is None


def test_init_writes_a_trainer_rule_that_matches_the_trainer_it_found(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """A TRL run started as `python3 train.py`: discovery finds it by evidence (it writes train.log), and the
    rlwatch.yaml that `rlwatch init` writes selects that same process as the trainer."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.py").write_text(
        "# a GRPOTrainer run (TRL), as far as discovery can tell from the script\n"
        "import time\nlog = open('train.log', 'a')\nprint(\"{'loss': 0.1, 'reward': 0.5}\", file=log, flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen(["bash", "-c", f"{sys.executable} train.py; true"], cwd=run, start_new_session=True)
    started.append(proc)
    wait_until(lambda: (run / "train.log").exists(), 30)
    out = rlwatch("init", str(run))
    assert out.returncode == 0, out.stdout + out.stderr
    cfg = yaml.safe_load((run / "rlwatch.yaml").read_text())
    trainer_rules = [r for r in cfg.get("processes", []) if r["role"] == "trainer"]
    assert trainer_rules, cfg
    import re

    assert any(re.search(r["cmdline_regex"], f"{sys.executable} train.py") for r in trainer_rules), trainer_rules
    report = json.loads(rlwatch("report", str(run), "--json").stdout)
    trainers = [p for p in report["processes"] if p["role"] == "trainer" and p["alive"]]
    assert len(trainers) == 1 and trainers[0]["cmdline"].endswith("train.py"), report["processes"]
