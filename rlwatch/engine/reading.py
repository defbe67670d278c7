"""The logs read and counted: the tailer and its waker, the event counter with the training and learning trackers
listening, each log's last progress line, the log view's lines, and diagnosis first (engine/preview: the newest
part of a big backlog counted ahead of the rest, so the diagnosis of now comes before the history).

This is the log loop's work: each chunk the tailer reads is counted and kept here, under the engine's lock, and
nothing here waits on a host source.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rlwatch.common.state import LogLine, Severity, TaggedLine
from rlwatch.discover.load import resolve
from rlwatch.engine.base import EngineBase
from rlwatch.engine.preview import MIN_BACKLOG, TAIL_BYTES, Counting, TailPreview
from rlwatch.engine.recent_lines import RECENT_LINES, RecentLines
from rlwatch.logs.events import EventCounter, Tag, build_kinds
from rlwatch.logs.learning import LearningTracker
from rlwatch.logs.tailer import Chunk, Tailer
from rlwatch.logs.training import TrainingTracker
from rlwatch.logs.waker import Waker

PREVIEW_WAIT_S = 3.0  # at most this long the log loop waits, once, for a preview's line numbers before reading on
# ... and at most this long before it counts the preview without them: what a 2 GiB prefix in the page cache takes
# to count on two busy cores. One from disk takes seconds, which the diagnosis of now does not wait for.
PREVIEW_FIRST_WAIT_S = 0.3
# ... and at most this long, once, for the host's first round: the diagnosis of now needs the processes as much as
# the newest lines (a crash is "crashed" only once no process of the run is seen alive). Read before it, a backlog
# of quiet lines was read whole on a loaded machine before the first round, and no record ever said the crash early.
PREVIEW_SAMPLE_WAIT_S = 10.0


class LogReading(EngineBase):
    """The engine's log side: what the log loop reads, counted once, and what the snapshot takes from the count."""

    def _setup_reading(self, *, force_polling: bool) -> None:
        """The logs to follow, their counter and trackers, and the log view's lines (the engine's first layer)."""
        self.log_patterns = self._log_patterns()
        self.tailer = Tailer(self.log_patterns)
        self.waker = Waker(self.log_patterns, force_polling=force_polling)
        main = self._counting()
        self.counter, self.training, self._starts = main.counter, main.training, main.starts
        assert main.learning is not None
        self.learning = main.learning
        self._progress_lines: dict[str, LogLine] = {}  # each log's last progress line (Snapshot.progress_lines)
        # Logs that printed a failure since their ending was read: read again at the next round, however recently
        # (server-crash: the dashboard kept an ending read before the trainer's failure, OK beside report's view).
        self._ending_stale: set[str] = set()
        for kind in main.counter.kinds:
            if kind.progress or kind.name in ("_steplike", "_progress", "_finished"):
                main.counter.subscribe(kind.name, self._note_progress)
            elif not kind.internal and kind.severity in (Severity.WARNING, Severity.CRITICAL):
                main.counter.subscribe(kind.name, lambda line: self._ending_stale.add(line.path))
        # Diagnosis first: the newest part of a big backlog counted ahead of the rest (engine/preview).
        self.preview: TailPreview | None = None
        self.preview_sizes = (MIN_BACKLOG, TAIL_BYTES)  # (backlog that earns a preview, bytes it counts first)
        self._preview_planned = False
        self._preview_waited = False
        self._recent_lines = RecentLines()  # the log view's newest lines (engine/recent_lines)
        self._unreleased = 0  # log bytes counted since free heap was last returned
        self.log_moves = 0  # chunks counted so far: the sample loop backs off while this stands still
        self._progress_kinds = tuple(k.name for k in self.cfg.events.custom if k.progress)

    def _log_patterns(self) -> list[str]:
        pats = [str(resolve(self.run_dir, g)) for g in self.cfg.training.logs]
        for rule in self.cfg.processes:
            if rule.log:
                pats.append(str(resolve(self.run_dir, rule.log)))
        if self.cfg.server.log:
            pats.append(str(resolve(self.run_dir, self.cfg.server.log)))
        return list(dict.fromkeys(pats))

    def _counting(self) -> Counting:
        """An event counter with the training tracker and the start banners listening: the engine's, or a
        preview's (the log view's tags are the engine's own, added by the caller)."""
        cfg, th = self.cfg, self.cfg.thresholds
        counter = EventCounter(
            build_kinds(cfg.events, bounded=self._untrusted),
            self.clock,
            recent_lines=cfg.events.recent_lines,
            rate_window_s=cfg.events.rate_window_s,
            storm_threshold=th.connection_storm,
        )
        training = TrainingTracker(
            self.clock,
            stall_s=th.stall_s,
            weight_update_timeout_s=th.weight_update_timeout_s,
            total_steps=cfg.training.total_steps,
        )
        # The run's learning metrics (loss, reward, KL, …), with the training tracker's step for TRL's step-less dicts.
        learning = LearningTracker(step_of=lambda: training.state().last_step)
        counting = Counting(counter, training, learning=learning)
        counter.subscribe("step", training.on_step)
        counter.subscribe("_reward", training.on_reward)
        counter.subscribe("weight_update", training.on_weight_update)
        counter.subscribe("_finished", training.on_step)
        counter.subscribe("_progress", training.on_step)
        counter.subscribe("_steplike", training.on_step)
        counter.subscribe("_banner", lambda line: _log_start(counting.starts, "container", line))
        for name in ("step", "_reward", "_learning"):  # after the training tracker: it has the line's step then
            counter.subscribe(name, learning.on_line)
        return counting

    def _note_log_errors(self) -> None:
        """The tailer's troubles (a log turned into a directory or a FIFO, permission denied) as the "logs" source.

        Runs on the thread that polls the tailer, and records only changes, so an idle poll costs a dict lookup.
        """
        errors = sorted(self.tailer.errors.items())
        text = "; ".join(f"{path}: {why}" for path, why in errors[:3]) or None
        if len(errors) > 3:
            text = f"{text} (and {len(errors) - 3} more)"
        if self.waker.error:
            text = f"{text}; {self.waker.error}" if text else self.waker.error
        current = self._status.get("logs")
        if current is None or current.error != text:
            with self._lock:
                self._ok("logs", text)

    def poll_logs(self) -> int:
        """Read and count everything new in the logs; returns the number of chunks handled."""
        chunks = self.tailer.poll()
        self._note_log_errors()
        if not chunks:
            return 0
        for chunk in chunks:
            self.feed_chunk(chunk)
        return len(chunks)

    def feed_chunk(self, chunk: Chunk) -> None:
        """Count one chunk and keep it for the log view: what the log loop does with each chunk it reads."""
        with self._lock:
            self._unreleased += len(chunk.data)
            self.log_moves += 1
            tags: list[Tag] = []  # handed to the log view with its chunk, read only if shown
            self.counter.tag_into(tags, RECENT_LINES)
            if self.preview is not None:
                self.preview.before_main_chunk(chunk, self.counter)
            self.counter.feed(chunk)
            if chunk.nlines:
                self.training.on_chunk(chunk, self.clock.time())
                self._recent_lines.add(chunk, tags)

    def drain_logs(self) -> None:
        while self.poll_logs():
            pass

    def _note_progress(self, line: LogLine) -> None:
        """Keep each log's last progress line (called under the lock, as the counter counts it)."""
        kept = self._progress_lines.get(line.path)
        if kept is None or line.lineno >= kept.lineno:
            self._progress_lines[line.path] = line

    def advance_preview(self) -> bool:
        """One step of diagnosis first, in the order the log loop takes them. True when what a snapshot shows
        changed: then publish it before reading on.

        1. Once the logs are open: plan the preview, counting the newest part of each big backlog, with its line
           numbers when their count answers within PREVIEW_FIRST_WAIT_S, else without.
        2. Next: wait once, a little, for the lines before those parts to be counted, and count the parts again
           with their true numbers.
        3. Then, at every call: take line counts that answered later; drop the preview once the main count has read
           past it."""
        if not self._preview_planned:
            self._preview_planned = True
            self.tailer.discover()
            min_backlog, tail_bytes = self.preview_sizes
            preview = TailPreview.plan(
                self.tailer.backlogs(),
                self._counting,
                self.clock.time,
                min_backlog=min_backlog,
                tail_bytes=tail_bytes,
                first_wait=PREVIEW_FIRST_WAIT_S,
            )
            if preview is None:
                return False
            with self._lock:
                self.preview = preview
            return True
        preview = self.preview
        if preview is None:
            return False
        if preview.empty or preview.done(self.tailer.read_offset):
            self._drop_preview()
            return True
        if not self._preview_waited:
            self._preview_waited = True
            preview.wait(PREVIEW_WAIT_S)  # not under the lock: snapshots go on, and the wait may be seconds
            if self.running:  # the sample loop publishes its round before it sets this (tests drive steps alone)
                self._first_sample.wait(PREVIEW_SAMPLE_WAIT_S)
        with self._lock:
            return preview.step()

    def _drop_preview(self) -> None:
        """From now on every snapshot is the main count's alone; the preview's line counts are stopped."""
        with self._lock:
            preview, self.preview = self.preview, None
        if preview is not None:
            preview.close()

    def lines_after(self, seq: int, limit: int = 2000) -> Sequence[TaggedLine]:
        """Not under the engine's lock (the lines have their own): the dashboard's event loop calls this, and must
        not wait for a chunk of backlog being counted."""
        return self._recent_lines.after(seq, limit)

    def event_streaks(self, kind: str) -> dict[str, int]:
        """Per-file current streak of ``kind`` (for per-worker policies), read under the counter's lock."""
        with self._lock:
            return self.counter.streaks(kind)


def _log_start(starts: dict[str, deque[float]], role: str, line: LogLine) -> None:
    starts.setdefault(role, deque(maxlen=50)).append(line.time)
