"""Trends over short sample windows: how fast something grows, and when a falling quantity reaches zero.

Both answers come from an ordinary least-squares line over the recent window rather than from the first and last
sample, so one noisy reading (a worker freeing a cache for a moment) does not swing the forecast. Samples are
timestamped with the monotonic clock so a wall-clock jump never bends the line; only the final answer of
:func:`exhausted_at` is converted to wall time, for display.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

DEFAULT_WINDOW_S = 600.0
# Below this span a slope is mostly noise: a line through two samples a second apart says nothing about an hour.
DEFAULT_MIN_SPAN_S = 60.0
DEFAULT_MIN_SAMPLES = 3
# A forecast further out than this is not a warning anybody can act on, and is usually a flat line with a wobble.
DEFAULT_HORIZON_S = 24 * 3600.0
# A line seen for a minute says nothing about the next hour: a forecast reaches at most this many times the span of
# samples it rests on (ten minutes of a steady fall: four hours), and only from a fall that is a line at all (the
# share of the samples' variance the line explains, R²): another tenant's processes coming and going are not a trend.
DEFAULT_MAX_EXTRAPOLATION = 24.0
DEFAULT_MIN_R2 = 0.8


def _recent(samples: Iterable[tuple[float, float]], window_s: float) -> list[tuple[float, float]]:
    finite = [(t, v) for t, v in samples if math.isfinite(t) and math.isfinite(v)]
    if not finite:
        return []
    newest = max(t for t, _ in finite)
    return [(t, v) for t, v in finite if newest - t <= window_s]


def slope(samples: Iterable[tuple[float, float]]) -> float | None:
    """Least-squares change of value per second, or None when the samples do not define a line."""
    points = [(t, v) for t, v in samples if math.isfinite(t) and math.isfinite(v)]
    if len(points) < 2:
        return None
    try:
        fit = statistics.linear_regression([t for t, _ in points], [v for _, v in points])
    except (statistics.StatisticsError, ValueError, OverflowError, ZeroDivisionError):
        return None
    return fit.slope if math.isfinite(fit.slope) else None


def growth_per_hour(
    samples: Sequence[tuple[float, float]],
    *,
    window_s: float = DEFAULT_WINDOW_S,
    min_span_s: float = DEFAULT_MIN_SPAN_S,
    min_samples: int = DEFAULT_MIN_SAMPLES,
) -> float | None:
    """Growth of the value per hour over the last ``window_s`` of ``(monotonic, value)`` samples.

    None until the window holds enough samples spread over enough time to mean something. What grows must still be
    growing: the answer is the smaller of the whole window's slope and its newer half's. A leak goes on; a process's
    start-up (torch imported, a CUDA context made: a torchrun agent went from nothing to 540 MB in its first seconds,
    then stayed) grows once and stops, and its one step read over a minute is no rate of anything.
    """
    recent = _recent(samples, window_s)
    if len(recent) < min_samples:
        return None
    times = [t for t, _ in recent]
    if max(times) - min(times) < min_span_s:
        return None
    per_second = slope(recent)
    if per_second is None:
        return None
    middle = min(times) + (max(times) - min(times)) / 2
    newer = [(t, v) for t, v in recent if t >= middle]
    newer_slope = slope(newer) if len(newer) >= min_samples else None
    if newer_slope is not None:
        per_second = min(per_second, newer_slope)
    per_hour = per_second * 3600.0
    return per_hour if math.isfinite(per_hour) else None  # a finite slope can still overflow an hour's worth


def exhausted_at(
    samples: Sequence[tuple[float, float, float]],
    *,
    window_s: float = DEFAULT_WINDOW_S,
    min_span_s: float = DEFAULT_MIN_SPAN_S,
    min_samples: int = DEFAULT_MIN_SAMPLES,
    min_drop: float = 0.0,
    horizon_s: float = DEFAULT_HORIZON_S,
    max_extrapolation: float = DEFAULT_MAX_EXTRAPOLATION,
    min_r2: float = DEFAULT_MIN_R2,
) -> float | None:
    """Wall time at which a falling quantity reaches zero, from ``(monotonic, wall, value)`` samples.

    Only answers when the fitted line falls by at least ``min_drop`` across the window (a significant fall, not a
    wobble), explains at least ``min_r2`` of the samples' variance (a trend, not noise), and reaches zero within
    ``horizon_s`` and within ``max_extrapolation`` times the span it was fitted on; the countdown starts from the
    latest observed value, so a sudden drop shows at once instead of being averaged away.
    """
    points = [
        (mono, wall, value)
        for mono, wall, value in samples
        if math.isfinite(mono) and math.isfinite(wall) and math.isfinite(value)
    ]
    if not points:
        return None
    newest_mono = max(p[0] for p in points)
    recent = [p for p in points if newest_mono - p[0] <= window_s]
    if len(recent) < min_samples:
        return None
    span = max(p[0] for p in recent) - min(p[0] for p in recent)
    if span < min_span_s:
        return None
    per_second = slope([(mono, value) for mono, _, value in recent])
    if per_second is None or per_second >= 0 or -per_second * span < min_drop:
        return None
    if min_r2 > 0 and _r2([(mono, value) for mono, _, value in recent]) < min_r2:
        return None
    _, latest_wall, latest_value = max(recent, key=lambda p: p[0])
    if latest_value <= 0:
        return latest_wall
    seconds_left = latest_value / -per_second
    if seconds_left > horizon_s or seconds_left > max_extrapolation * span:
        return None
    return latest_wall + seconds_left


def _r2(points: Sequence[tuple[float, float]]) -> float:
    """How much of the values' variance a straight line explains (0: none, 1: all); 0 when it cannot be told."""
    try:
        r = statistics.correlation([t for t, _ in points], [v for _, v in points])
    except (statistics.StatisticsError, ValueError, OverflowError, ZeroDivisionError):
        return 0.0
    return r * r if math.isfinite(r) else 0.0
