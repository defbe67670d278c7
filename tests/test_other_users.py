"""Another local user (``nobody``) against root's rlwatch: the seven findings of the review, each refused.

1. another user's process in root's run directory is never the run's: never recorded, never executed again, never a
   reason to refuse, and every resume plan says whose command it runs and the environment it brings;
2. a process of theirs named like Ray's raylet is not this host's cluster: Ray's token is never sent to it;
3. an untrusted configuration names no dashboard, not even on loopback;
4. their links, in their own 0755 directory, lead only to what they could read themselves;
5. ``init --force`` never writes through a link planted at rlwatch.yaml;
6. an untrusted file's kernel logs outside the run directory are dropped; a FIFO as rlwatch.yaml, a tree 1500
   levels deep, neither hangs nor ends in a traceback;
7. secrets written as prose are redacted, bidi controls stripped, nothing an untrusted file names is fetched, and a
   newline in a path never starts a line of a generated service file.

The second user is ``nobody``: processes are started as it (``Popen(user=…)``) and files given to it with chown, so
the kernel presents exactly what the attack presents. The run directories live under ``/tmp`` (mode 0755, as most
are) because pytest's own temporary tree is private to root and ``nobody`` could not work in it.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlwatch.common.clock import SystemClock
from rlwatch.common.redact import for_others, redact
from rlwatch.common.textsafe import clean_line
from rlwatch.common.trust import LinkRefused, open_read
from rlwatch.config.models import (
    ActionsConfig,
    Config,
    GpuConfig,
    ProcessRule,
    Provenance,
    RayConfig,
    TrainingConfig,
)
from rlwatch.discover.load import ConfigError, load_config, missing_paths, resolve_config
from rlwatch.engine.engine import Engine
from rlwatch.remedy.actions.api import Actions
from rlwatch.remedy.actions.plan import RESUME
from rlwatch.remedy.service import install, supervisor_snippet
from rlwatch.sources.launches import LaunchBook
from rlwatch.sources.membership import assess
from rlwatch.sources.ray import RaySource, find_cluster
from tests.simhost import wait_until
from tests.unprivileged import Runtime, shared_dir

try:
    NOBODY, NOGROUP = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
except KeyError:  # pragma: no cover - every Debian has it
    NOBODY = NOGROUP = -1

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or NOBODY < 0, reason="needs root and a second user (nobody)")

TOKEN = "0c1dfe3a22b94a0e9b7d4e1f9a6c5b4d"  # a token as Ray makes one (uuid4().hex)


@pytest.fixture
def run() -> Iterator[Path]:
    """Root's run directory, 0755 like most, where ``nobody`` can enter but not write."""
    d = shared_dir("rlwatch-other-users-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def theirs() -> Iterator[Path]:
    """``nobody``'s own 0755 directory."""
    d = shared_dir("rlwatch-nobody-", owner=NOBODY)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _as_nobody(started: list[subprocess.Popen[bytes]], argv: list[str], cwd: Path, **env: str) -> int:
    """``sleep`` as ``nobody`` in ``cwd``, under the command line ``argv`` (its argv[0] a name of our choosing, as
    ``exec -a`` gives); returns once /proc shows that command line."""
    proc = subprocess.Popen(
        argv, executable="/bin/sleep", cwd=cwd, user=NOBODY, group=NOGROUP, extra_groups=[],
        env={"PATH": "/usr/bin:/bin", **env}, start_new_session=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    started.append(proc)
    wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == argv[0].encode(), 5)
    return proc.pid


# ------------------------------------------------------------------------------------------------ 1 (critical)
def test_another_users_process_is_never_the_run_recorded_or_started_again(
    run: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """``PYTHONPATH=~/evil python3 -m verl.trainer.main_ppo`` of ``nobody``, working in root's run directory and
    matching the trainer's role: root's report once, then a resume, must never run it as root."""
    marker = f"verl.trainer.main_ppo-{os.getpid()}"
    pid = _as_nobody(started, [f"python3 -m {marker}", "300"], run, PYTHONPATH="/home/nobody/evil")
    cfg = Config(
        gpu=GpuConfig(backend="none"),
        processes=[ProcessRule(role="trainer", cmdline_regex=marker)],
        actions=ActionsConfig(audit_log=str(run / "audit.jsonl")),
    )
    engine = Engine(cfg, run, clock=SystemClock())
    engine.sample()
    engine.sample()  # the second round sees the live run it found in the first
    assert pid not in engine.live_run(fresh=True).members  # works in the directory, matches the role: not the run
    assert not (run / ".rlwatch" / "launches.json").exists()  # never recorded
    assert pid not in {t.pid for t in engine.stack_targets()}  # never read with py-spy
    plan = Actions(engine).prepare(RESUME).plan
    assert plan.refused is not None and "trainer is alive" not in plan.refused  # never a reason to refuse
    assert f"recorded from pid {pid} of nobody (uid {NOBODY})" in plan.refused  # and never run: whose it is, said
    engine.stop()


def test_a_launch_record_keeps_its_owner_and_a_plan_shows_whose_command_and_environment(run: Path) -> None:
    """The book an earlier rlwatch wrote: a record of another uid, or of none (written before owners were kept), is
    refused; root's own is shown with whose command it is and the environment it differs by, --dry-run too."""
    book = run / ".rlwatch" / "launches.json"
    cfg = Config(gpu=GpuConfig(backend="none"), actions=ActionsConfig(audit_log=str(run / "audit.jsonl")))
    base = {"argv": ["/bin/true", "train"], "cwd": str(run), "first_seen": 1.0, "pid": 4242, "create_time": 2.0}
    for owner, said in ((NOBODY, f"nobody (uid {NOBODY})"), (None, "an unknown user")):
        book.parent.mkdir(mode=0o700, exist_ok=True)
        book.write_text(json.dumps({"trainer": {**base, "env": {"PYTHONPATH": "/x"}, "uid": owner}}))
        os.chmod(book, 0o600)
        plan = Actions(Engine(cfg, run, clock=SystemClock())).prepare(RESUME).plan
        assert plan.refused is not None and f"recorded from pid 4242 of {said}" in plan.refused, plan.refused
    env = {**os.environ, "PYTHONPATH": "/home/someone/lib", "HF_TOKEN": "hf_" + "a1B2" * 9}
    env.pop("HOME", None)
    book.write_text(json.dumps({"trainer": {**base, "env": env, "uid": 0}}))
    plan = Actions(Engine(cfg, run, clock=SystemClock())).prepare(RESUME).plan
    assert plan.refused is None and plan.start
    why = plan.start[0].reason or ""
    assert "as this user (uid 0), the command line of pid 4242 of root (uid 0)" in why, why
    assert "PYTHONPATH=/home/someone/lib" in why and "HOME unset" in why and "HF_TOKEN=***" in why, why
    own = LaunchBook(book).get("trainer")
    assert own is not None and LaunchBook(book).remember("launcher", own)  # root's own: kept
    assert not LaunchBook(book).remember("server", replace(own, uid=NOBODY))  # another's: never recorded


def test_discovery_takes_nothing_from_another_users_process(run: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """Their `python3 -m sglang.launch_server --port 18302` in root's run directory names no server to probe."""
    from rlwatch.discover.discovery import discover

    pid = _as_nobody(started, ["python3 -m sglang.launch_server --port 18302", "300"], run)
    cfg = discover(run, "auto")
    assert cfg.server.url is None and not any(f"pid {pid}" in why for why in cfg.provenance.server), cfg.provenance


def test_membership_counts_only_the_users_processes(run: Path, started: list[subprocess.Popen[bytes]]) -> None:
    from rlwatch.sources.membership import run_owners

    pid = _as_nobody(started, ["sleep", "300"], run)
    view = assess(str(run), roles={pid: "trainer"})
    assert pid not in view.members and pid not in view.roles
    assert pid in assess(str(run), roles={pid: "trainer"}, owners={0, NOBODY}).members  # a user a config names
    # root, allow_other_users, a trusted file naming the user: theirs count; an untrusted file names nobody
    assert run_owners(allow_other_users=True, other_users=["nobody"], trusted=True) == {0, NOBODY}
    assert run_owners(allow_other_users=True, other_users=["nobody"], trusted=False) == {0}
    assert run_owners(allow_other_users=False, other_users=["nobody"], trusted=True) == {0}


# ------------------------------------------------------------------------------------------------ 2 and 3 (Ray)
class _Seen(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()})
        body = b'{"data": {"result": {"result": []}}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Another user's listener on loopback, as a fake raylet's --webui names it: what it was sent."""
    seen: list[dict[str, str]] = []
    handler = type("H", (_Seen,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def _fake_proc(root: Path, pid: int, uid: int, *argv: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "status").write_text(f"Name:\traylet\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def test_rays_token_goes_only_to_the_users_own_ray(tmp_path: Path, listener: tuple[str, list[dict[str, str]]]) -> None:
    address, seen = listener
    procs = tmp_path / "proc"
    raylet = "/home/nobody/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet"
    _fake_proc(procs, 700, NOBODY, raylet, f"--webui={address}", "--log_dir=/home/nobody/session/logs")
    _fake_proc(procs, 701, NOBODY, "python3", "/x/ray/dashboard/dashboard.py", "--host=127.0.0.1", "--port=1")
    assert not find_cluster(str(procs)).running  # another user's raylet and dashboard are no cluster of this host
    cfg = Config(profile="verl")
    src = RaySource(cfg, tmp_path, SystemClock(), proc_root=str(procs), env={"RAY_AUTH_TOKEN": TOKEN}, home=None)
    src.poll_api(force=True)
    assert seen == []  # nothing asked, no token sent
    mine = tmp_path / "mine"
    _fake_proc(mine, 800, os.geteuid(), raylet, f"--webui={address}")
    src = RaySource(cfg, tmp_path, SystemClock(), proc_root=str(mine), env={"RAY_AUTH_TOKEN": TOKEN}, home=None)
    src.poll_api(force=True)
    assert seen and seen[-1]["authorization"] == f"Bearer {TOKEN}"  # the user's own raylet, on loopback: yes


LISTEN = (
    "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "print(s.getsockname()[1], flush=True); c, _ = s.accept(); sys.stdout.write(repr(c.recv(4096))); sys.stdout.flush()"
)


@pytest.mark.skipif(not os.access("/usr/bin/python3", os.X_OK), reason="needs /usr/bin/python3 for nobody")
def test_a_port_another_user_listens_on_is_never_asked(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """The user's own raylet names a loopback port that another user got to first (Ray's dashboard died, or was
    never started): their listener is neither sent the token nor asked for actors."""
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-c", LISTEN], cwd="/", user=NOBODY, group=NOGROUP, extra_groups=[],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    started.append(proc)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    procs = tmp_path / "proc"
    raylet = "/srv/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet"
    _fake_proc(procs, 800, os.geteuid(), raylet, f"--webui=127.0.0.1:{port}")
    src = RaySource(
        Config(profile="verl"), tmp_path, SystemClock(), proc_root=str(procs), env={"RAY_AUTH_TOKEN": TOKEN}
    )
    src.poll_api(force=True)
    state = src.sample([])
    assert state is not None and f"served by uid {NOBODY}, not by this user or root: not asked" in (state.api or "")
    os.killpg(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=10)
    assert out == b""  # nothing ever reached it


def test_an_untrusted_config_names_no_dashboard(
    run: Path, tmp_path: Path, listener: tuple[str, list[dict[str, str]]]
) -> None:
    address, seen = listener
    config = run / "rlwatch.yaml"
    config.write_text(f"profile: verl\nray:\n  dashboard: http://{address}\n")
    os.chown(config, NOBODY, -1)
    cfg, _ = resolve_config(run, None)
    assert cfg.provenance.distrust is not None and cfg.ray.dashboard is None
    planted = Config(profile="verl", ray=RayConfig(dashboard=f"http://{address}")).with_provenance(
        Provenance(source="rlwatch.yaml", distrust="owned by uid 65534")
    )
    src = RaySource(planted, run, SystemClock(), proc_root=str(tmp_path / "none"), env={"RAY_AUTH_TOKEN": TOKEN})
    src.poll_api(force=True)
    assert seen == []


# ------------------------------------------------------------------------------------------------ 4 (links)
def test_a_link_in_another_users_directory_leads_only_to_what_they_could_read(theirs: Path, run: Path) -> None:
    private = Path(tempfile.mkdtemp(dir=run))  # root's 0700 directory
    secret = private / "secret.txt"
    secret.write_text("ROOT ONLY\n")
    os.chmod(secret, 0o644)  # readable by its mode, but nobody cannot enter the directory above it
    for name, target in (("train.log", secret), ("dmesg.log", Path("/etc/shadow"))):
        link = theirs / name
        link.symlink_to(target)
        os.lchown(link, NOBODY, NOGROUP)
        with pytest.raises(LinkRefused, match="which uid 65534 cannot read: not followed"):
            open_read(link)
    public = run / "public.log"
    public.write_text("anyone may read this\n")
    os.chmod(public, 0o644)
    fine = theirs / "public.log"
    fine.symlink_to(public)
    os.lchown(fine, NOBODY, NOGROUP)
    with open_read(fine) as fh:  # what they could read themselves is followed
        assert fh.read() == b"anyone may read this\n"


# ------------------------------------------------------------------------------------------------ 5 (writes)
def test_init_force_never_writes_through_a_planted_link(theirs: Path, run: Path, separated: Runtime) -> None:
    """Root's ``init`` on their directory works as them: a link they planted at rlwatch.yaml is refused, and the file
    written afterwards is theirs, as if they had run ``init`` themselves."""

    def init(*args: str) -> subprocess.CompletedProcess[str]:
        return separated.run_as_root("init", str(theirs), *args, timeout=60)

    victim = run / "victim.txt"
    victim.write_text("root's file\n")
    link = theirs / "rlwatch.yaml"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOGROUP)
    assert init("--force").returncode != 0
    assert victim.read_text() == "root's file\n" and link.is_symlink()
    os.unlink(link)
    done = init()
    assert done.returncode == 0, done.stderr  # a fresh name: written, a regular file
    written = theirs / "rlwatch.yaml"
    assert written.is_file() and not written.is_symlink()
    assert written.stat().st_uid == NOBODY  # written by them, not by root


# ------------------------------------------------------------------------------------------------ 6 (medium)
def test_an_untrusted_configs_kernel_logs_outside_the_run_are_dropped(run: Path) -> None:
    config = run / "rlwatch.yaml"
    config.write_text("host:\n  kernel_log_files: ['../../../root/x.log', 'dmesg.log']\nserver:\n  url: http://x\n")
    os.chown(config, NOBODY, -1)
    cfg, _ = resolve_config(run, None)
    assert cfg.host.kernel_log_files == ["dmesg.log"]
    assert cfg.server.url is None  # nothing it names is fetched


def test_a_fifo_as_the_config_is_refused_at_once(run: Path) -> None:
    fifo = run / "rlwatch.yaml"
    os.mkfifo(fifo)
    result: list[BaseException | None] = []

    def load() -> None:
        try:
            load_config(fifo)
            result.append(None)
        except BaseException as exc:  # what it raised is the answer
            result.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():  # the old blocking open: let it go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert result and isinstance(result[0], ConfigError) and "not a regular file" in str(result[0])


def test_a_tree_1500_levels_deep_ends_in_no_traceback(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1500):  # made one level at a time: pathlib's and os.makedirs's own recursion would give out first
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    log = os.open("train.log", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(log, b"step 1\n")
    os.close(log)
    os.close(fd)
    cfg = Config(training=TrainingConfig(logs=["**/*.log"])).model_copy(update={"run_dir": str(tmp_path)})
    try:
        assert missing_paths(cfg, tmp_path) == []  # found at the bottom, no RecursionError
    finally:  # removed here: pytest's own clean-up of old temporary directories recurses, and would give out at exit
        subprocess.run(["rm", "-rf", "--", str(tmp_path / "d")], check=True)


# ------------------------------------------------------------------------------------------------ 7 (low)
@pytest.mark.parametrize(
    ("line", "secret"),
    [
        # The prose forms the review found secrets written in (a key quoted back by a wrapper around W&B's login,
        # a password echoed by a launcher script, Ray's token named in words).
        ("wandb: ERROR API key 0123456789abcdef0123456789abcdef01234567 is invalid", "0123456789abcdef01234567"),
        ("PASSWORD hunter3", "hunter3"),
        (f"ray auth token {TOKEN}", TOKEN),
        (f"the token is {TOKEN}.", TOKEN),
        ("secret => s3cr3t-value", "s3cr3t-value"),
        ("GET https://acct.blob.core.windows.net/c/x?sv=2022-11-02&sig=Ab3%2Bd&se=2030", "Ab3%2Bd"),
    ],
)
def test_prose_secrets_are_redacted(line: str, secret: str) -> None:
    assert secret not in redact(line)


@pytest.mark.parametrize(
    "line",
    [
        # The real messages of W&B (wandb login), huggingface_hub (HfApi.whoami) and Ray (its token authentication):
        # they carry no secret, and every word of them stays.
        "wandb: ERROR API key must be 40 characters long, yours was 86",
        "requests.exceptions.HTTPError: Invalid user token. If you didn't pass a user token, make sure you are "
        "properly logged in by executing `huggingface-cli login`, and if you did pass a user token, double-check "
        "it's correct.",
        "Token authentication is enabled but no authentication token was found. Please provide an authentication "
        "token using one of these methods: 1. Set the RAY_AUTH_TOKEN environment variable 2. Set the "
        "RAY_AUTH_TOKEN_PATH environment variable (pointing to a token file) 3. Create a token file at the default "
        "location: ~/.ray/auth_token",
        "FATAL: password authentication failed for user postgres",
        "eos token 151645 appended",
    ],
)
def test_the_words_around_a_secret_stay(line: str) -> None:
    assert redact(line) == line


def test_bidi_controls_are_stripped_with_the_other_controls() -> None:
    spoofed = "ok \u202egnp.exe\u202c \u2066x\u2069 \u200e\u200f"
    for out in (clean_line(spoofed), for_others(spoofed)):
        assert not any(c in out for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")


def test_init_writes_no_secret_of_a_command_line(run: Path, started: list[subprocess.Popen[bytes]]) -> None:
    from rlwatch.cli import main

    pkg = run / "verl" / "trainer"
    pkg.mkdir(parents=True)
    (run / "verl" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "main_ppo.py").write_text(
        "import time\nlog = open('train.log', 'a')\nprint('step:1 - actor/loss:0.1', file=log, flush=True)\n"
        "time.sleep(300)\n"
    )
    secret = "hf_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF"
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl.trainer.main_ppo", "--hf_token", secret], cwd=run, start_new_session=True
    )
    started.append(proc)
    wait_until(lambda: (run / "train.log").exists(), 10)
    assert main(["init", str(run)]) == 0
    text = (run / "rlwatch.yaml").read_text()
    assert "--hf_token ***" in text and secret not in text


def test_generated_service_files_hold_a_newline_in_a_path_on_its_line(tmp_path: Path) -> None:
    odd = tmp_path / "run\n[program:evil]\ncommand=evil"
    odd.mkdir()
    snippet = supervisor_snippet(["rlwatch", "watch", str(odd)], odd)
    assert [line for line in snippet.splitlines() if line.startswith("[")] == [snippet.splitlines()[0]]
    assert "run\\x0a[program:evil]\\x0acommand=evil" in snippet  # the name, escaped on its line
    with pytest.raises(OSError, match="control character"):
        install(odd, mode="hook", dry=True, rlwatch=["rlwatch"])


def test_fleet_fetches_nothing_an_untrusted_config_names(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlwatch.tui.launch import main

    config = run / "fleet.yaml"
    config.write_text("fleet:\n  prometheus: http://127.0.0.1:9/\n")
    os.chown(config, NOBODY, -1)
    assert main(["fleet", "--config", str(config)]) == 2
    assert "nothing it names is fetched" in capsys.readouterr().err
