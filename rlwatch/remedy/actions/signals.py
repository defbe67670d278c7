"""One signal to one process, and only to the process that was meant.

A pid is re-used once its process is reaped, so "kill pid" can hit a stranger. The pidfd closes that race: the fd
names the process that held the pid when it was opened, its start time is re-checked through ``/proc`` after
opening (if the pid held someone else by then, the fd's process is gone anyway and nothing is sent), and
``pidfd_send_signal`` on the fd can never reach a later holder of the pid. Where pidfds are unavailable (old
kernels, seccomp profiles that answer ENOSYS or EPERM), psutil's check-then-signal is used: it re-checks the start
time too, with a far smaller race left open. Nothing here raises: every failure is an outcome the caller reports.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import psutil

from rlwatch.remedy.actions.identity import CREATE_TIME_TOLERANCE_S, Ident, create_time_of, read_proc_stat, same_process

_POLL_INTERVAL_S = 0.02  # for processes watched without a pidfd
_MAX_WAIT_S = 0.1  # re-read the (injected) clock at least this often
_PIDFD_UNAVAILABLE = frozenset({errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class SignalStatus(StrEnum):
    SENT = "sent"
    GONE = "gone"
    REUSED = "reused"
    DENIED = "denied"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class SignalOutcome:
    """What happened to one signal; ``str()`` gives the one-line form ("sent", "error: …")."""

    status: SignalStatus
    detail: str | None = None
    via: str | None = None  # "pidfd" | "psutil" when a signal was attempted

    @property
    def sent(self) -> bool:
        return self.status is SignalStatus.SENT

    def __str__(self) -> str:
        return f"{self.status.value}: {self.detail}" if self.detail else self.status.value


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _open_pidfd(pid: int) -> int | SignalOutcome | None:
    """A pidfd, an outcome that ends the attempt (the pid names nothing), or None: use the psutil path."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return SignalOutcome(SignalStatus.GONE)
    except AttributeError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:  # out of range for a pid: nothing can run there
            return SignalOutcome(SignalStatus.GONE)
        return None


def _check_start(ident: Ident) -> SignalOutcome | None:
    """Re-read the start of whatever holds the pid now; None when it is still the process ``ident`` names."""
    stat = read_proc_stat(ident.pid)
    if stat is None or stat.gone:
        return SignalOutcome(SignalStatus.GONE)
    started = create_time_of(stat)
    if started is None:
        return SignalOutcome(SignalStatus.ERROR, "cannot read the boot time to check the start time")
    if abs(started - ident.create_time) > CREATE_TIME_TOLERANCE_S:
        return SignalOutcome(
            SignalStatus.REUSED, f"pid {ident.pid} started at {started:.2f}, expected {ident.create_time:.2f}"
        )
    return None


def _send_pidfd(ident: Ident, sig: int) -> SignalOutcome | None:
    """Signal through a pidfd; None when pidfds cannot be used here (the caller falls back)."""
    opened = _open_pidfd(ident.pid)
    if opened is None or isinstance(opened, SignalOutcome):
        return opened
    fd = opened
    try:
        mismatch = _check_start(ident)
        if mismatch is not None:
            return mismatch
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return SignalOutcome(SignalStatus.GONE)
        except AttributeError:
            return None
        except OSError as exc:
            if exc.errno in _PIDFD_UNAVAILABLE:  # EPERM may be a seccomp filter: let psutil tell the real answer
                return None
            return SignalOutcome(SignalStatus.ERROR, _one_line(exc), "pidfd")
        return SignalOutcome(SignalStatus.SENT, via="pidfd")
    finally:
        os.close(fd)


def _send_psutil(ident: Ident, sig: int) -> SignalOutcome:
    try:
        proc = psutil.Process(ident.pid)
        if abs(proc.create_time() - ident.create_time) > CREATE_TIME_TOLERANCE_S:
            return SignalOutcome(SignalStatus.REUSED, f"pid {ident.pid} holds a process started at another time")
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return SignalOutcome(SignalStatus.GONE)
        proc.send_signal(sig)  # psutil re-checks (pid, create time) right before kill(2)
    except psutil.ZombieProcess:
        return SignalOutcome(SignalStatus.GONE)
    except psutil.NoSuchProcess:
        return SignalOutcome(SignalStatus.GONE)
    except psutil.AccessDenied:
        return SignalOutcome(SignalStatus.DENIED, f"not permitted to signal pid {ident.pid}", "psutil")
    except (psutil.Error, OSError, ValueError) as exc:
        return SignalOutcome(SignalStatus.ERROR, _one_line(exc), "psutil")
    return SignalOutcome(SignalStatus.SENT, via="psutil")


def send_signal(ident: Ident, sig: int) -> SignalOutcome:
    """Send ``sig`` to the process ``ident`` names, and to nothing else. Never signals pid 1 or below. Never raises."""
    if ident.pid <= 1:
        return SignalOutcome(SignalStatus.DENIED, f"never signal pid {ident.pid}")
    try:
        outcome = _send_pidfd(ident, sig)
        return outcome if outcome is not None else _send_psutil(ident, sig)
    except Exception as exc:  # a safety primitive reports, it does not crash the action that called it
        return SignalOutcome(SignalStatus.ERROR, _one_line(exc))


def _watch_fd(ident: Ident) -> int | None:
    """A pidfd verified to belong to ``ident``; None when only polling can follow it."""
    opened = _open_pidfd(ident.pid)
    if not isinstance(opened, int):
        return None
    if not same_process(ident):  # opened after the pid was re-used: this fd watches a stranger
        os.close(opened)
        return None
    return opened


def wait_gone(
    idents: Iterable[Ident], timeout: float, clock_monotonic: Callable[[], float] = time.monotonic
) -> tuple[list[Ident], list[Ident]]:
    """Wait until every process has exited or ``timeout`` passes; returns (gone, alive) in the order given.

    Processes are followed through their pidfds, which become readable when they exit, so the wait ends as soon as
    the last one goes; processes without a pidfd are re-checked every few tens of milliseconds. A zombie is gone.
    The deadline is read from ``clock_monotonic`` between short waits, so an injected clock must keep moving.
    """
    order = list(dict.fromkeys(idents))
    gone: set[Ident] = set()
    fds: dict[int, Ident] = {}
    polled: list[Ident] = []
    poller = select.poll()
    deadline = clock_monotonic() + max(0.0, timeout)
    try:
        for ident in order:
            if not same_process(ident):
                gone.add(ident)
                continue
            fd = _watch_fd(ident)
            if fd is None:
                polled.append(ident)
            else:
                fds[fd] = ident
                poller.register(fd, select.POLLIN)
        while fds or polled:
            for ident in [i for i in polled if not same_process(i)]:
                polled.remove(ident)
                gone.add(ident)
            remaining = deadline - clock_monotonic()
            if not (fds or polled) or remaining <= 0:
                break
            wait_s = min(remaining, _POLL_INTERVAL_S if polled else _MAX_WAIT_S)
            for fd, _events in poller.poll(max(1, int(wait_s * 1000))):
                ident = fds.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                if same_process(ident):  # an event that is not an exit: keep following it by polling
                    polled.append(ident)
                else:
                    gone.add(ident)
    except Exception:  # never raise: whatever could not be confirmed gone is reported alive
        pass
    finally:
        for fd in fds:
            os.close(fd)
    return [i for i in order if i in gone], [i for i in order if i not in gone]
