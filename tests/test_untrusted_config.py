"""An rlwatch.yaml another user wrote, read by root: it names nothing outside its run directory, no process by pid,
no address, and no expression that could keep rlwatch busy for ever (issue 40, item 3; probe findings N2, N4b, N10,
N11).

One rule does it, where configurations are loaded (rlwatch.discover.load), over every key the models mark as naming
a path, a pid, an expression or an address (rlwatch.config.models.names_of). The first tests walk the models: a
string key left unmarked fails here, so a path key added later cannot be forgotten; every marked key, set to
something outside, is dropped and said. The others are the probe's reproductions through the real command line:
the files are given to ``nobody`` with chown, the other user's process runs as ``nobody``, run directories live under
``/tmp`` (pytest's own tree is private to root, where ``nobody`` could not work).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
import yaml
from pydantic import BaseModel

from rlwatch.common.clock import FakeClock
from rlwatch.config.models import Config, CustomEvent, EventsConfig, NotifyTarget, ProcessRule, names_of
from rlwatch.discover.load import resolve_config
from rlwatch.logs.events import NATIVE, EventCounter, build_kinds
from tests.logs.chunking import whole_line_chunks
from tests.simhost import wait_until
from tests.unprivileged import shared_dir

try:
    NOBODY, NOGROUP = pwd.getpwnam("nobody").pw_uid, pwd.getpwnam("nobody").pw_gid
except KeyError:  # pragma: no cover - every Debian has it
    NOBODY = NOGROUP = -1

needs_root = pytest.mark.skipif(os.geteuid() != 0 or NOBODY < 0, reason="needs root and a second user (nobody)")

# The string keys that name no path, pid, expression or address, and why each may be anything in an untrusted file.
NOT_PATHS = {
    "ProcessRule.role": "a name the file gives its processes",
    "ProcessRule.command": "argv to start one again: an untrusted file's actions are all refused",
    "ServerConfig.health_path": "the path asked of the server's own address (which an untrusted file cannot name)",
    "ServerConfig.command": "argv to start the server again: an untrusted file's actions are all refused",
    "CustomEvent.name": "the name its lines are counted under",
    "ActionsConfig.other_users": "user names: an untrusted file's actions are all refused",
    "ActionsConfig.resume_command": "argv to start the run again: an untrusted file's actions are all refused",
    "ActionsConfig.protected_names": "process names rlwatch never stops: more of them only refuses more",
    "PolicyWhen.event": "an event kind's name",
    "PolicyWhen.role": "a role's name",
    "PolicyWhen.dead": "a role's name",
    "Policy.name": "the policy's name",
    "FleetConfig.job": "a Prometheus job name, asked only of the Prometheus (an address, dropped)",
    "NotifyTarget.name": "shown instead of the URL (which is dropped)",
}
# What a list item needs besides the key under test, to be valid.
ITEMS: dict[type[BaseModel], dict[str, object]] = {
    ProcessRule: {"role": "worker", "cmdline_regex": "nothing_matches_zz"},
    CustomEvent: {"name": "mine", "pattern": "mine"},
    NotifyTarget: {"url": "json://127.0.0.1:9/x"},
}


def _names_text(annotation: object) -> bool:
    """Whether a field's type holds a free string (a Literal's fixed choices are not one)."""
    if annotation is str:
        return True
    if get_origin(annotation) is Literal:
        return False
    return any(_names_text(arg) for arg in get_args(annotation))


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _model_in(arg)) is not None:
            return found
    return None


def _fields(
    model: type[BaseModel], loc: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], type[BaseModel], str]]:
    """(where, model, key) of every field of every model under ``model``; a list of models is marked by ``[]``."""
    for key, field in model.model_fields.items():
        yield (*loc, key), model, key
        sub = _model_in(field.annotation)
        if sub is not None:
            is_list = "list[" in repr(field.annotation) or get_origin(field.annotation) is list
            yield from _fields(sub, (*loc, f"{key}[]" if is_list else key))


def test_every_string_key_of_the_models_says_what_it_names() -> None:
    """A new key that names a path is held to the untrusted file's rule by its type; this fails for one typed ``str``
    with no mark, unless it is listed above with the reason it may be anything."""
    unmarked = []
    seen = set()
    for _, model, key in _fields(Config):
        field = model.model_fields[key]
        name = f"{model.__name__}.{key}"
        seen.add(name)
        if _names_text(field.annotation) and not names_of(field) and name not in NOT_PATHS:
            unmarked.append(name)
    assert unmarked == [], f"string keys with no mark (RunPath, PidSource, UserPattern, RemoteUrl): {unmarked}"
    assert set(NOT_PATHS) <= seen, f"listed keys the models no longer have: {set(NOT_PATHS) - seen}"


def _marked() -> list[tuple[tuple[str, ...], frozenset[str], bool]]:
    """(where, what it names, whether it is a list) of every marked key."""
    out = []
    for loc, model, key in _fields(Config):
        field = model.model_fields[key]
        marks = names_of(field)
        if marks:
            out.append((loc, marks, get_origin(field.annotation) is list))
    return out


MARKED = _marked()


def _data(loc: tuple[str, ...], value: object) -> dict[str, Any]:
    """The smallest YAML document that sets ``loc`` to ``value`` (an item of a list made valid by ``ITEMS``)."""
    model: type[BaseModel] = Config
    root: dict[str, Any] = {}
    here = root
    for part in loc[:-1]:
        key = part.removesuffix("[]")
        sub = _model_in(model.model_fields[key].annotation)
        assert sub is not None
        if part.endswith("[]"):
            assert sub in ITEMS, f"{sub.__name__}: add a valid item to ITEMS"
            item = dict(ITEMS[sub])
            here[key] = [item]
            here = item
        else:
            here = here.setdefault(key, {})
        model = sub
    here[loc[-1]] = value
    return root


def _get(cfg: Config, loc: tuple[str, ...]) -> object:
    value: Any = cfg
    for part in loc:
        if part.endswith("[]"):
            items = getattr(value, part[:-2])
            if not items:
                return None
            value = items[0]
        else:
            value = getattr(value, part)
    return value


def _key(loc: tuple[str, ...]) -> str:
    return ".".join(loc).replace("[]", "[0]")


@pytest.fixture
def theirs() -> Iterator[Path]:
    """Root's 0755 run directory, where ``nobody``'s rlwatch.yaml lies (given to it with chown, as a shared directory
    or a copied file leaves it): a run directory ``nobody`` owns is worked on as ``nobody`` (issue 40, item 1), and
    what is left for this rule is a file root reads in a directory of its own."""
    d = shared_dir("rlwatch-untrusted-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def rootonly() -> Iterator[Path]:
    """Root's private directory (0700), outside every run directory."""
    d = shared_dir("rlwatch-rootonly-", 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _write_theirs(run: Path, data: dict[str, Any], name: str = "rlwatch.yaml") -> Path:
    path = run / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    os.chown(path, NOBODY, NOGROUP)
    return path


def _outside(marks: frozenset[str], is_list: bool) -> object:
    if "pattern" in marks:
        value: object = r"(a)\1"  # a backreference: RE2 cannot run it
    elif "remote" in marks:
        value = "http://127.0.0.1:9/x"
    else:
        value = "/root/outside"
    return [value] if is_list else value


@needs_root
@pytest.mark.parametrize(("loc", "marks", "is_list"), MARKED, ids=[_key(m[0]) for m in MARKED])
def test_every_marked_key_of_an_untrusted_file_is_dropped_and_said(
    theirs: Path, loc: tuple[str, ...], marks: frozenset[str], is_list: bool
) -> None:
    value = _outside(marks, is_list)
    _write_theirs(theirs, _data(loc, value))
    cfg, _ = resolve_config(theirs, None)
    assert cfg.provenance.distrust is not None
    got = _get(cfg, loc)
    if loc == ("run_dir",):
        assert got == str(theirs)  # the run directory it was given, not the file's elsewhere
    else:
        assert got != value and got not in (value, [value])
    said = [line for line in cfg.provenance.ignored if f": {_key(loc)}" in line]
    assert said and all(line.startswith("rlwatch.yaml:") and line.endswith(": ignored") for line in said), (
        cfg.provenance.ignored
    )

    # The same file, root's own, is taken as it is: the rule is for untrusted files only.
    os.chown(theirs / "rlwatch.yaml", 0, 0)
    cfg, _ = resolve_config(theirs, None)
    assert cfg.provenance.distrust is None and cfg.provenance.ignored == ()
    assert _get(cfg, loc) == value or loc == ("run_dir",)


@needs_root
@pytest.mark.parametrize(
    "inside", ["train.log", "logs/*.log", "**/*.log", ".", "{run}/sub/x.log", "{run}/*"], ids=lambda s: s
)
def test_paths_inside_the_run_directory_stay(theirs: Path, inside: str) -> None:
    value = inside.format(run=theirs)
    _write_theirs(theirs, {"training": {"logs": [value], "checkpoint_dirs": [value]}, "server": {"log": value}})
    cfg, _ = resolve_config(theirs, None)
    assert cfg.provenance.distrust is not None and cfg.provenance.ignored == ()
    assert cfg.training.logs == [value] and cfg.training.checkpoint_dirs == [value] and cfg.server.log == value


@needs_root
@pytest.mark.parametrize(
    "outside",
    ["../x.log", "sub/../../x.log", "*/../../x.log", "/etc/*.conf", "/*", "~/x.log", "{run}-other/x.log", "{run}*/x"],
    ids=lambda s: s,
)
def test_paths_outside_the_run_directory_go(theirs: Path, outside: str) -> None:
    value = outside.format(run=theirs)
    _write_theirs(theirs, {"training": {"logs": ["train.log", value]}})
    cfg, _ = resolve_config(theirs, None)
    assert cfg.training.logs == ["train.log"]
    assert len(cfg.provenance.ignored) == 1 and "rlwatch.yaml:4: training.logs[1]: " in cfg.provenance.ignored[0]


# ------------------------------------------------------------------------------------------- the probe's findings
def _report(run: Path, *args: str, timeout: float = 90) -> tuple[str, dict[str, Any]]:
    """The real `rlwatch report` as root, in text and in JSON; a hang fails at ``timeout``."""
    cmd = [sys.executable, "-m", "rlwatch", "report", str(run)]
    text = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert text.returncode in (0, 1, 3), text.stderr
    out = subprocess.run([*cmd, *args, "--json"], capture_output=True, text=True, timeout=timeout, check=False)
    assert out.returncode in (0, 1, 3), out.stderr
    return text.stdout + text.stderr, json.loads(out.stdout)


def _config_source(report: dict[str, Any]) -> str:
    errors = [src["error"] for src in report["sources"] if src["name"] == "config"]
    assert errors, report["sources"]
    return str(errors[0])


@pytest.mark.slow
@needs_root
def test_n2_an_untrusted_file_names_no_root_only_file_as_a_log(theirs: Path, rootonly: Path) -> None:
    """N2: ``server.log`` and ``processes[].log`` naming root-only files: their text is shown nowhere."""
    secret = f"ROOT_ONLY_SECRET_{uuid.uuid4().hex[:12]}"
    (rootonly / "secret.txt").write_text(
        f'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nRuntimeError: {secret}\n'
    )
    (rootonly / "dmesg_secret.log").write_text(f"[  1.0] Out of memory: Killed process 123 (python) {secret}_OOM\n")
    for path in rootonly.iterdir():
        path.chmod(0o600)
    (theirs / "train.log").write_text("step:1 - loss:1\n")
    _write_theirs(
        theirs,
        {
            "profile": "generic",
            "training": {"logs": ["train.log"]},
            "server": {"log": str(rootonly / "dmesg_secret.log")},
            "processes": [
                {"role": "worker", "cmdline_regex": "nothing_matches_zz", "log": str(rootonly / "secret.txt")}
            ],
        },
    )
    text, report = _report(theirs)
    assert secret not in text and secret not in json.dumps(report)
    assert str(rootonly) not in json.dumps(report["logs"])
    said = _config_source(report)
    assert (
        f"rlwatch.yaml:6: server.log: '{rootonly / 'dmesg_secret.log'}' is outside the run directory: ignored" in said
    )
    assert f"rlwatch.yaml:10: processes[0].log: '{rootonly / 'secret.txt'}' is outside the run directory" in said
    assert said.endswith("(the file is not trusted)")
    assert "config: rlwatch.yaml:6: server.log:" in text  # the text report says it too


@pytest.mark.slow
@needs_root
def test_n11_an_untrusted_files_other_paths_outside_are_not_used(theirs: Path, rootonly: Path) -> None:
    """N11: checkpoint_dirs, recover_info, config_file, output_volume, host.shm_path, gpu.simulated_state, the kernel
    and Ray logs, all in root's 0700 directory: none is read, not even a name or a size comes out."""
    ck = rootonly / "ck"
    (ck / "global_step_9").mkdir(parents=True)
    (ck / "global_step_9" / "model.pt").write_bytes(b"\0" * 1024)
    (rootonly / "state.json").write_text('{"global_step": 9}')
    (rootonly / "train.yaml").write_text("trainer:\n  total_epochs: 77\n")
    (rootonly / "gpu.json").write_text('{"gpus": [], "time": 0}')
    (rootonly / "dmesg.log").write_text("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    (theirs / "train.log").write_text("step:1 - loss:1\n")
    _write_theirs(
        theirs,
        {
            "profile": "generic",
            "training": {
                "logs": ["train.log"],
                "checkpoint_dirs": [str(ck)],
                "recover_info": str(rootonly / "state.json"),
                "config_file": str(rootonly / "train.yaml"),
                "output_volume": str(rootonly),
            },
            "gpu": {"backend": "simulated", "simulated_state": str(rootonly / "gpu.json")},
            "host": {"shm_path": str(rootonly), "kernel_log": "files", "kernel_log_files": [str(rootonly / "*.log")]},
            "ray": {"enabled": True, "session_logs": str(rootonly)},
        },
    )
    text, report = _report(theirs)
    rest = json.dumps({k: v for k, v in report.items() if k != "sources"})
    assert str(rootonly) not in rest  # read nowhere: no checkpoint, step, size, kernel line or Ray log of it
    assert "global_step_9" not in rest and "total_epochs" not in rest and "fallen off the bus" not in rest
    assert str(rootonly) not in text.split("Not available")[0]
    said = _config_source(report)
    for key in (
        "training.checkpoint_dirs[0]",
        "training.recover_info",
        "training.config_file",
        "training.output_volume",
        "gpu.backend",
        "gpu.simulated_state",
        "host.shm_path",
        "host.kernel_log_files[0]",
        "ray.session_logs",
    ):
        assert f": {key}: " in said, (key, said)


@pytest.mark.slow
@needs_root
def test_n10_an_untrusted_files_expressions_cannot_hang_the_report(theirs: Path) -> None:
    """N10: ``^(a+)+$`` over a line of forty ``a`` and a ``!`` (Python's re: for ever) is run by RE2 and counts what
    it should; an expression RE2 cannot run (a backreference) is refused by file, line and key."""
    (theirs / "train.log").write_text("step:1 - loss:1\n" + ("a" * 40 + "!\n") * 3 + "aaaa\n")
    _write_theirs(
        theirs,
        {
            "profile": "generic",
            "training": {"logs": ["train.log"]},
            "events": {
                "custom": [
                    {"name": "evil", "pattern": "^(a+)+$"},
                    {"name": "back", "pattern": r"(a)\1"},
                ]
            },
        },
    )
    started = time.monotonic()
    _, report = _report(theirs, timeout=60)
    assert time.monotonic() - started < 60
    assert report["events"]["evil"]["count"] == 1  # bounded, and still right: only the "aaaa" line
    assert "back" not in report["events"]
    assert "rlwatch.yaml:10: events.custom[1].pattern: RE2 cannot run it (invalid escape sequence: \\1): ignored" in (
        _config_source(report)
    )


def _sleeper(
    started: list[subprocess.Popen[bytes]],
    argv: list[str],
    cwd: Path,
    *,
    user: int | None = None,
    exe: str = "/bin/sleep",
) -> int:
    """``exe`` (``sleep``) under the command line ``argv``; returns once /proc shows it."""
    who: dict[str, Any] = {} if user is None else {"user": user, "group": NOGROUP, "extra_groups": []}
    proc = subprocess.Popen(
        argv, executable=exe, cwd=cwd, env={"PATH": "/usr/bin:/bin"}, start_new_session=True,
        stdin=subprocess.DEVNULL, **who,
    )  # fmt: skip
    started.append(proc)
    wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == argv[0].encode(), 10)
    return proc.pid


@pytest.mark.slow
@needs_root
def test_n10_an_untrusted_rules_expression_over_a_long_command_line_cannot_hang(
    theirs: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """The same over the command lines the process rules read: ``nobody``'s process whose argument is forty ``a``
    and a ``!``, their rule ``(a+)+$``."""
    # sh runs sleep as its child (the "; exit 0" keeps it from exec'ing it), under a command line that ends "a…a!".
    pid = _sleeper(started, ["sleeper", "-c", "sleep 300; exit 0", "a" * 40 + "!"], theirs, user=NOBODY, exe="/bin/sh")
    (theirs / "train.log").write_text("step:1 - loss:1\n")
    _write_theirs(
        theirs,
        {
            "profile": "generic",
            "training": {"logs": ["train.log"]},
            "processes": [{"role": "w", "cmdline_regex": "(a+)+$"}],
        },
    )
    _, report = _report(theirs, timeout=60)
    assert pid not in {p["pid"] for p in report["processes"]}  # RE2's answer: "…a!" does not end in a's
    assert started[0].poll() is None  # it lived all along: its command line was there to be read


@pytest.mark.slow
@needs_root
def test_n4b_an_untrusted_pidfile_names_no_member(theirs: Path, started: list[subprocess.Popen[bytes]]) -> None:
    """N4b: ``nobody``'s pidfile rule names an unrelated root process (working outside the run directory): it is no
    member of the run, its command line is not read into anything, and the dropped rule is said."""
    pid = _sleeper(started, ["ROOT_OTHER_JOB_A", "300"], Path("/"))
    pids = theirs / "pids"
    pids.mkdir()
    (pids / "t.pid").write_text(f"{pid}\n")
    (theirs / "train.log").write_text("step:1 - loss:1\n")
    _write_theirs(
        theirs,
        {
            "profile": "generic",
            "training": {"logs": ["train.log"]},
            "processes": [{"role": "trainer", "pidfile": "pids/t.pid"}],
        },
    )
    text, report = _report(theirs)
    assert pid not in {p["pid"] for p in report["processes"]}
    assert "ROOT_OTHER_JOB_A" not in text and "ROOT_OTHER_JOB_A" not in json.dumps(report)
    said = _config_source(report)
    assert "rlwatch.yaml:7: processes[0].pidfile: names a process by pid: ignored" in said
    assert "rlwatch.yaml:6: processes[0]: nothing is left to select its processes by" in said
    assert not (theirs / ".rlwatch" / "launches.json").exists()


# ------------------------------------------------------------------------------------ both counting paths, bounded
def test_a_bounded_kind_counts_the_same_on_both_paths_in_linear_time() -> None:
    """The compiled event path and the Python one ask RE2 the same question (the bounded expression reads as
    re.ASCII, so neither decides it by Python's reading): same counts, and neither takes long."""
    cfg = EventsConfig(
        custom=[
            CustomEvent(name="evil", pattern="^(a+)+$"),
            CustomEvent(name="word", pattern=r"\bfoo\b|bar"),
            CustomEvent(name="caseless", pattern="Emergency", ignore_case=True),
        ],
        brake_pattern="(x+x+)+y",
    )
    data = (("a" * 40 + "!\n") * 50 + "aaaa\nxfoo foo café\nbar\nEMERGENCY\n" + "x" * 40 + "\n").encode()
    counts = []
    for native in [False, True] if NATIVE else [False]:
        counter = EventCounter(build_kinds(cfg, bounded=True), FakeClock(), native=native)
        started = time.monotonic()
        for chunk in whole_line_chunks(data, "/run/train.log", 4096):
            counter.feed(chunk)
        assert time.monotonic() - started < 10
        counts.append({k: s.count for k, s in counter.summaries().items() if not k.startswith("_")})
    assert counts[0]["evil"] == 1 and counts[0]["word"] == 2 and counts[0]["caseless"] == 1
    assert counts[0].get("emergency_brake", 0) == 0
    assert all(c == counts[0] for c in counts)
