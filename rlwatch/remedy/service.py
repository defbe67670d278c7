"""`rlwatch service install`: keep the watchdog alive across crashes and reboots (incident 3's watchdog was not).

With systemd (it is PID 1 and ``/run/systemd/system`` exists), a unit: ``Type=notify`` so systemd knows when the
watchdog really watches, ``WatchdogSec=`` so a hung decision loop is killed and restarted, ``Restart=on-failure``
with a start limit so a broken configuration does not loop for ever. ``KillMode=process``: stopping or restarting
the watchdog must never take down the workers, servers and trainers it started — they live in the unit's cgroup.

Most GPU containers have no systemd. There the equivalent is a start-up hook, ``<run dir>/.rlwatch/
start-watchdog.sh``: a small respawn loop (restart on failure, 1 s doubling to 60 s, reset after a minute of
running; a clean exit — someone stopped it — ends the loop) guarded by a lock so starting it twice runs it once.
Something must start the hook: the container's start command, a login shell, or supervisord; the text printed
says which line to add where, and plainly that nothing else will bring the watchdog back.

The line printed for root to run at every start must run a file only root can change. A hook inside the run
directory is that only when every directory from ``/`` to the run's belongs to this user or root and nobody else can
change it; otherwise (another user's run directory: they could rename ``.rlwatch`` and put their own script in its
place) the hook, its lock and its log live in this user's own state directory (``$XDG_STATE_HOME/rlwatch/hooks``,
``/var/lib/rlwatch/hooks`` for root), made without following anyone else's links and checked the same way; when
neither is possible, nothing is written and the reason is said.

Nothing is enabled or started here: the files are written (or printed with ``--print``) and the commands to
enable them are shown, because enabling a service is a decision about the machine that the person makes.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import shlex
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rlwatch.common.statefiles import StateDir, StateFileError, open_dir_for_write, write_file
from rlwatch.common.trust import trusted_owner
from rlwatch.sources.watchdog_state import state_dir

Mode = Literal["auto", "systemd", "hook"]
HOOK_NAME = "start-watchdog.sh"
HOOK_LOG = "watchdog.log"
WATCHDOG_SEC = 30
START_LIMIT_INTERVAL_S = 600
START_LIMIT_BURST = 5


@dataclass(frozen=True)
class Installed:
    """What ``install`` did: files written (path → content) and what the person reads."""

    kind: Literal["systemd", "hook"]
    files: dict[str, str] = field(default_factory=dict)
    lines: tuple[str, ...] = ()


def systemd_is_init() -> bool:
    """sd_booted(3): the system was booted with systemd (so a unit will actually be run)."""
    return Path("/run/systemd/system").is_dir()


def rlwatch_argv() -> list[str]:
    """The absolute command that runs this same rlwatch: the console script if we were started as one, else
    the interpreter running this module (``python -m rlwatch``), so the service uses this installation."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "rlwatch" and script.is_file():
        return [str(script.resolve())]
    beside = Path(sys.executable).parent / "rlwatch"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "rlwatch"]


def unit_name(run_dir: Path) -> str:
    """A stable unit name per run directory (two runs on one host get two watchdogs)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", run_dir.name).strip("-.") or "run"
    digest = hashlib.sha1(str(run_dir).encode(), usedforsecurity=False).hexdigest()[:8]
    return f"rlwatch-watch-{slug[:40]}-{digest}.service"


def watch_argv(rlwatch: list[str], run_dir: Path, config: Path | None) -> list[str]:
    argv = [*rlwatch, "watch", str(run_dir)]
    if config is not None:
        argv += ["--config", str(config)]
    return argv


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str:
    """Text put on one line of a generated file (a comment, ``Description=``, ``directory=``): a newline in a run
    directory's name must not start a line of its own — in a hook that line would be a shell command."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def unsafe_path(*texts: str) -> str | None:
    """The first of ``texts`` holding a control character (a newline), which no service file can hold safely."""
    return next((t for t in texts if _CONTROL.search(t)), None)


def _systemd_quote(argv: list[str]) -> str:
    """ExecStart= words: double-quoted where needed; ``%`` and ``$`` escaped so systemd substitutes nothing, and
    control characters written as C escapes (systemd unquotes ``\\n``), never raw."""
    out = []
    for raw in argv:
        word = raw.replace("%", "%%").replace("$", "$$")
        if re.fullmatch(r"[A-Za-z0-9_./:=@+-]+", word):
            out.append(word)
        else:
            quoted = word.replace("\\", "\\\\").replace('"', '\\"')
            out.append('"' + _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", quoted) + '"')
    return " ".join(out)


def unit_text(argv: list[str], run_dir: Path, *, user: bool) -> str:
    """The systemd unit that runs ``argv`` (``rlwatch watch RUN_DIR``) as a notify service with a watchdog."""
    lines = [
        "# Written by `rlwatch service install`: the rlwatch watchdog of one training run.",
        "[Unit]",
        f"Description=rlwatch watchdog for {_one_line(str(run_dir)).replace('%', '%%')}",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL_S}",
        f"StartLimitBurst={START_LIMIT_BURST}",
    ]
    if not user:
        lines += ["Wants=network-online.target", "After=network-online.target"]
    lines += [
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={_systemd_quote(argv)}",
        f"WorkingDirectory={_one_line(str(run_dir)).replace('%', '%%')}",
        "Environment=PYTHONUNBUFFERED=1",
        # The decision loop pings every half of this; a hung loop is killed (SIGABRT) and restarted.
        f"WatchdogSec={WATCHDOG_SEC}",
        "Restart=on-failure",
        "RestartSec=5",
        "TimeoutStopSec=60",
        # Processes the watchdog restarted (workers, the server, the trainer) live in this unit's cgroup:
        # stopping or restarting the watchdog must leave them running.
        "KillMode=process",
    ]
    if not user and os.geteuid() != 0:
        lines.append(f"User={getpass.getuser()}")
    lines += ["", "[Install]", f"WantedBy={'default.target' if user else 'multi-user.target'}", ""]
    return "\n".join(lines)


class Refused(OSError):
    """No place to put the start-up hook that only this user (or root) can change: one line saying why."""

    refusal = True


def hook_home() -> Path:
    """This user's own directory for start-up hooks of runs whose directory others could change."""
    if xdg := os.environ.get("XDG_STATE_HOME"):
        return Path(xdg) / "rlwatch" / "hooks"
    if os.geteuid() == 0:
        return Path("/var/lib/rlwatch/hooks")
    return Path.home() / ".local" / "state" / "rlwatch" / "hooks"


def chain_problem(path: Path) -> str | None:
    """Why someone other than this user or root could change what ``path`` (a directory) holds, or None: each
    directory from ``/`` down to it (none a symbolic link) belongs to this user or root, and is writable by nobody
    else, or is sticky (``/tmp``), where nobody else may rename the next one down, which is this user's or root's."""
    path = Path(os.path.abspath(path))
    for directory in [*reversed(path.parents), path]:
        try:
            st = os.lstat(directory)
        except OSError as exc:
            return f"{directory}: {exc.strerror or exc}"
        if stat.S_ISLNK(st.st_mode):
            return f"{directory} is a symbolic link"
        if not stat.S_ISDIR(st.st_mode):
            return f"{directory} is not a directory"
        if not trusted_owner(st.st_uid):
            return f"{directory} belongs to uid {st.st_uid}"
        # Sticky (/tmp): nobody else may rename what this user or root made there; the next one down is checked next.
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return f"{directory} is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def hook_dir(run_dir: Path, *, create: bool) -> tuple[Path, str | None]:
    """Where the hook of ``run_dir`` lives, and why not in the run directory (None: it does, in ``.rlwatch/``).

    Raises :class:`Refused` when the run directory is not this user's alone and this user's own hook directory
    cannot be made or is not theirs alone either."""
    why = chain_problem(run_dir)
    if why is None:
        return state_dir(run_dir), None
    home = hook_home()
    if create:
        refusal = f"the start-up hook of {run_dir} cannot be kept in it ({why}), nor in {home}"
        existing = next((p for p in (home, *home.parents) if os.path.lexists(p)), Path("/"))
        if (bad := chain_problem(existing)) is not None:  # nothing made below a directory someone else controls
            raise Refused(f"{refusal}: {bad}")
        try:  # made without following a link anyone but this user or root made, then checked whole
            os.close(open_dir_for_write(home, create=True))
        except StateFileError as exc:
            raise Refused(f"{refusal}: {exc}") from None
        except OSError as exc:
            raise Refused(f"{refusal}: {exc.strerror or exc}") from None
        if (bad := chain_problem(home)) is not None:
            raise Refused(f"{refusal}: {bad}")
    return home / unit_name(run_dir).removesuffix(".service"), why


def hook_text(
    argv: list[str],
    run_dir: Path,
    *,
    first_delay_s: float = 1.0,
    max_delay_s: float = 60.0,
    state: Path | None = None,
) -> str:
    """A POSIX sh respawn loop for hosts without systemd: restarts ``argv`` when it fails, with a backoff. Its lock
    and log are in ``state`` (the run's ``.rlwatch/`` unless given)."""
    rundir = state if state is not None else state_dir(run_dir)
    shown = _one_line(str(run_dir))
    return f"""#!/bin/sh
# Written by `rlwatch service install`: keeps the rlwatch watchdog of {shown} running on a host without systemd.
# It restarts `rlwatch watch` whenever it fails (exit status not 0, or killed), waiting {first_delay_s:g} s, doubling
# to {max_delay_s:g} s, back to {first_delay_s:g} s after a minute of running. A clean exit (someone stopped the
# watchdog) ends the loop. One copy per run: a second start of this hook exits at once.
# This loop is only alive if something starts it: the container's start command, a login shell, or supervisord.
set -u
umask 077
STATE={shlex.quote(str(rundir))}
mkdir -p "$STATE" || exit 1
# As rlwatch itself does: only a private directory of this user, never through a link planted in it.
if [ -L "$STATE" ] || [ ! -O "$STATE" ] || [ -n "$(find "$STATE" -maxdepth 0 -perm /022)" ]; then
    echo "$STATE is not a directory of this user that only it can write; not starting" >&2
    exit 1
fi
for name in start-watchdog.lock {HOOK_LOG}; do
    if [ -L "$STATE/$name" ]; then
        echo "$STATE/$name is a symbolic link; not starting" >&2
        exit 1
    fi
done
if command -v flock >/dev/null 2>&1; then
    exec 9>>"$STATE/start-watchdog.lock"
    flock -n 9 || exit 0
fi
delay={first_delay_s:g}
while :; do
    started=$(date +%s)
    {" ".join(shlex.quote(a) for a in argv)} >>"$STATE/{HOOK_LOG}" 2>&1 </dev/null
    status=$?
    if [ "$status" -eq 0 ]; then
        echo "$(date '+%F %T') rlwatch watch stopped cleanly; not restarting" >>"$STATE/{HOOK_LOG}"
        exit 0
    fi
    if [ $(( $(date +%s) - started )) -ge 60 ]; then delay={first_delay_s:g}; fi
    echo "$(date '+%F %T') rlwatch watch exited with status $status; restarting in ${{delay}}s" >>"$STATE/{HOOK_LOG}"
    sleep "$delay"
    delay=$(awk -v d="$delay" -v m={max_delay_s:g} 'BEGIN {{ d = d * 2; if (d > m) d = m; print d }}')
done
"""


def supervisor_snippet(argv: list[str], run_dir: Path, state: Path | None = None) -> str:
    """supervisord's program section; its log in ``state`` (the run's ``.rlwatch/`` unless given), a file supervisord
    opens as root."""
    name = unit_name(run_dir).removesuffix(".service")
    return "\n".join(
        [
            f"[program:{name}]",
            f"command={_one_line(' '.join(shlex.quote(a) for a in argv))}",
            f"directory={_one_line(str(run_dir))}",
            "autorestart=unexpected",
            "exitcodes=0",
            "startsecs=10",
            "startretries=10",
            "stopsignal=TERM",
            "stopwaitsecs=30",
            "redirect_stderr=true",
            f"stdout_logfile={_one_line(str((state if state is not None else state_dir(run_dir)) / HOOK_LOG))}",
        ]
    )


def unit_path(name: str, *, user: bool) -> Path:
    if user:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / name
    return Path("/etc/systemd/system") / name


def install(
    run_dir: Path,
    *,
    config: Path | None = None,
    user: bool = False,
    mode: Mode = "auto",
    dry: bool = False,
    rlwatch: list[str] | None = None,
) -> Installed:
    """Write the unit (systemd) or the start-up hook (no systemd), or only show them with ``dry``.

    Raises OSError when a file cannot be written; the caller turns that into one line.
    """
    run_dir = run_dir.resolve()
    argv = watch_argv(rlwatch or rlwatch_argv(), run_dir, config.resolve() if config else None)
    if (bad := unsafe_path(*argv)) is not None:
        raise OSError(f"{bad!r} holds a control character (a newline): no service file is written for it")
    use_systemd = systemd_is_init() if mode == "auto" else mode == "systemd"
    if use_systemd:
        return _install_unit(run_dir, argv, user=user, dry=dry)
    return _install_hook(run_dir, argv, dry=dry)


def _install_unit(run_dir: Path, argv: list[str], *, user: bool, dry: bool) -> Installed:
    name = unit_name(run_dir)
    path = unit_path(name, user=user)
    text = unit_text(argv, run_dir, user=user)
    ctl = "systemctl --user" if user else "systemctl"
    if dry:
        return Installed("systemd", {}, (f"# {path}", text))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # never through a link planted at the unit's name
        write_file(path, text.encode())
    except StateFileError as exc:
        raise OSError(str(exc)) from None
    lines = [
        f"wrote {path}",
        "systemd keeps the watchdog alive: it restarts it when it fails or stops answering "
        f"(WatchdogSec={WATCHDOG_SEC}), and starts it at boot once enabled. Enable and start it with:",
        f"  {ctl} daemon-reload && {ctl} enable --now {name}",
        f"Status: {ctl} status {name}   Logs: journalctl {'--user ' if user else ''}-u {name}",
    ]
    if user:
        lines.append(
            "A user service starts at boot without a login only with lingering: "
            f"loginctl enable-linger {getpass.getuser()}"
        )
    return Installed("systemd", {str(path): text}, tuple(lines))


def _install_hook(run_dir: Path, argv: list[str], *, dry: bool) -> Installed:
    state, why = hook_dir(run_dir, create=not dry)
    hook = state / HOOK_NAME
    text = hook_text(argv, run_dir, state=state)
    start = f"setsid sh {shlex.quote(str(hook))} >/dev/null 2>&1 </dev/null &"
    lines = [
        "No systemd here (as in most containers), so nothing restarts the watchdog by itself.",
        f"{'would write' if dry else 'wrote'} {hook}: a loop that restarts `rlwatch watch` when it fails "
        "(1 s doubling to 60 s) and runs once per run directory however often it is started.",
    ]
    if why is not None:
        lines.append(f"It is kept outside the run directory, where only this user can change it: {why}.")
    lines += [
        "The loop itself must be started at every container start. Do one of:",
        f"  - container start command / entrypoint, before the training command:  {start}",
        f"  - ~/.bashrc (starts with the first shell after a restart; later shells find it running):  {start}",
        "  - supervisord, if the container runs it: add this program section:",
        *("      " + line for line in supervisor_snippet(argv, run_dir, state).splitlines()),
        f"Its output goes to {state / HOOK_LOG}; `rlwatch report` says whether the watchdog runs.",
    ]
    if dry:
        return Installed("hook", {}, (*lines, "", f"# {hook}", text))
    try:  # never through a link planted at the hook's name, only into a checked directory
        StateDir(state.parent, state.name).write(HOOK_NAME, text.encode(), mode=0o700)
    except StateFileError as exc:
        raise OSError(str(exc)) from None
    return Installed("hook", {str(hook): text}, tuple(lines))
