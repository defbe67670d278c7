"""Waking the log loop when a log directory changes, so a new line is counted within tens of milliseconds.

watchfiles is only the alarm clock: the tailer decides what changed by itself (rename and truncation look like
any other modification to a watcher). When inotify cannot be used (forced polling for overlay or NFS mounts,
``WATCHFILES_FORCE_POLLING``, the watch limit reached, a directory that does not exist yet) :meth:`Waker.wait`
simply times out at the poll interval and the caller polls anyway.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from typing import Literal

__all__ = ["Waker", "watch_roots"]

_MAGIC = re.compile(r"[*?\[]")
_FALSEY = {"", "0", "false", "no", "off"}


def _base_dir(pattern: str) -> str:
    """The deepest directory a glob pattern is certain to lie under (the parent of a plain file path)."""
    parts = pattern.split(os.sep)
    for i, part in enumerate(parts):
        if _MAGIC.search(part):
            return os.sep.join(parts[:i]) or os.sep
    return os.path.dirname(pattern) or os.curdir


def watch_roots(patterns: Sequence[str]) -> list[str]:
    """Directories to watch recursively for ``patterns``, without one nested in another."""
    # Watching "/" recursively would walk the whole machine: such a pattern is left to polling.
    roots = sorted({os.path.normpath(_base_dir(p)) for p in patterns} - {os.sep})
    kept: list[str] = []
    for root in roots:
        if not any(root == k or root.startswith(k.rstrip(os.sep) + os.sep) for k in kept):
            kept.append(root)
    return kept


class Waker:
    """A background watcher that sets a flag on any change under the log directories."""

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        poll_interval_s: float = 0.05,
        recheck_s: float = 0.25,
        force_polling: bool = False,
        debounce_ms: int = 50,
        step_ms: int = 100,
    ) -> None:
        self._roots = watch_roots(patterns)
        # A pattern under "/" itself is not watched (see watch_roots): then everything is polled.
        self._partial = any(os.path.normpath(_base_dir(p)) == os.sep for p in patterns)
        # Polling costs one stat per followed file (about 15 µs for eight logs), so a 50 ms poll keeps a line's
        # latency under 100 ms for well under 0.1 % of a core. The watcher thread's own checks for directories
        # that do not exist yet need no such haste.
        self._poll = poll_interval_s
        self._recheck = recheck_s
        env = os.environ.get("WATCHFILES_FORCE_POLLING", "").strip().lower()
        self._forced = force_polling or env not in _FALSEY
        self._debounce = debounce_ms
        # watchfiles wakes every step to look at the stop event, taking the GIL each time: at 20 ms that was a
        # quarter of the idle dashboard's CPU (issue 35). 100 ms keeps a line's wake-up within 100-200 ms.
        self._step = step_ms
        self._changed = threading.Event()
        self._stop = threading.Event()
        self._watching_all = False
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    @property
    def mode(self) -> Literal["inotify", "polling"]:
        """ "inotify" while every log directory is being watched, else "polling"."""
        return "inotify" if self._watching_all and not self._stop.is_set() else "polling"

    def start(self) -> None:
        """Start the watcher thread (no thread at all when polling is forced). Idempotent."""
        if self._forced or self._thread is not None or not self._roots or self._partial:
            return
        self._thread = threading.Thread(target=self._run, name="rlwatch-waker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the watcher thread; watchfiles notices the stop event within one ``step``."""
        self._stop.set()
        self._changed.set()  # release a caller blocked in wait()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def wait(self, timeout: float) -> bool:
        """Block until something changed (True) or ``timeout`` passed (False).

        While not every directory is watched, the wait is cut to the poll interval, so the caller polls.
        """
        if self._stop.is_set():
            return False
        if not self._watching_all:
            timeout = min(timeout, self._poll)
        changed = self._changed.wait(max(0.0, timeout))
        if changed:
            self._changed.clear()
        return changed and not self._stop.is_set()

    def _run(self) -> None:
        while not self._stop.is_set():
            existing = [root for root in self._roots if os.path.isdir(root)]
            if not existing:
                self._watching_all = False
                self._stop.wait(self._recheck)
                continue
            missing = len(existing) < len(self._roots)
            self._watching_all = not missing
            try:
                # Imported by the watcher thread, not the module: a command that never follows its logs (`report`)
                # does not pay its 20-40 ms at the start (tests/test_import_hygiene.py).
                import watchfiles

                for changes in watchfiles.watch(
                    *existing,
                    watch_filter=None,
                    debounce=self._debounce,
                    step=self._step,
                    stop_event=self._stop,
                    rust_timeout=max(1, int(self._recheck * 1000)) if missing else 5000,
                    yield_on_timeout=True,
                    raise_interrupt=False,
                    force_polling=False,
                    ignore_permission_denied=True,
                ):
                    if changes:
                        self._changed.set()
                    if missing and any(os.path.isdir(r) for r in self._roots if r not in existing):
                        self._changed.set()  # a directory appeared: files may already be in it
                        break  # watch again, with it
            except Exception as exc:  # no inotify, watch limit reached, a root removed: fall back to polling
                self.error = f"file watching failed, polling instead: {type(exc).__name__}: {exc}"
                self._watching_all = False
                return
            if not missing and not self._stop.is_set():
                # The generator ended without a stop: a watched root went away. Start over.
                self._watching_all = False
                self._stop.wait(self._recheck)
