"""A bench result's figures: each kernel (ms a call), each training step (ms a step) and each copy over the link
(ms a copy), matched by what was measured (operation, device, precision, size; model, batch; direction, pinned,
bytes), with the median of the repeats as the figure. A format-2 result keeps every repeat (`seconds`), and the
interval comes from resampling them (independent repeats: blocks of one); a format-1 result has the median only.

The time per sample of a bench comparison is that of its training steps: the geometric mean, over the steps
both ran, of NEW's median step time over BASE's (`training_ratio`)."""

from __future__ import annotations

import math

import numpy as np

from gpufeed.compare.comparable import Comparable, as_text
from gpufeed.compare.figures import Series
from gpufeed.compare.model import Figure
from gpufeed.measure.difference import RESAMPLES, Samples
from gpufeed.report.kinds.bench import BENCH as BENCH_DOCUMENT


def _samples(entry: dict, scale: float = 1000.0) -> Samples:
    repeats = entry.get("seconds")
    values = repeats if isinstance(repeats, list) and repeats else [entry["seconds_median"]]
    return Samples(scale * np.array(values, dtype=float), median=True)


def bench_series(document: dict) -> list[Series]:
    series = []
    for kernel in document.get("kernels") or []:
        what = f"{kernel['op']} {kernel['device']} {kernel['precision']} {kernel['size']}"
        series.append(Series(f"kernel {what}", what, "ms a call", 0, True, _samples(kernel)))
    for step in document.get("train_steps") or []:
        what = f"{step['model']} step {step['device']} {step['precision']} batch {step['batch_size']}"
        series.append(Series(f"train {what}", what, "ms a step", 0, True, _samples(step)))
    for copy in document.get("link") or []:
        what = (f"{copy['direction'].replace('_', ' ')} {'pinned' if copy['pinned'] else 'pageable'} "
                f"{copy['bytes']:,} bytes")
        if copy.get("seconds"):
            samples = _samples(copy)
        elif copy.get("gb_per_s"):
            samples = Samples(np.array([1000.0 * copy["bytes"] / (copy["gb_per_s"] * 1e9)]), median=True)
        else:
            continue
        series.append(Series(f"link {what}", what, "ms a copy", 0, True, samples))
    return series


def training_ratio(figures: list[Figure]) -> tuple[float | None, tuple[float, float] | None, bool | None]:
    """NEW's time per sample over BASE's minus 1, over the training steps both ran (geometric mean of the
    ratios), the range of those steps' interval bounds as ratios, and whether the change is real: every step's
    own difference is real and in the same direction (None: no step had an interval)."""
    steps = [f for f in figures if f.key.startswith("train ") and f.ratio is not None]
    if not steps:
        return None, None, None
    ratio = math.exp(sum(math.log(f.ratio) for f in steps) / len(steps)) - 1.0
    judged = [f for f in steps if f.interval is not None]
    if len(judged) < len(steps):
        return ratio, None, None
    low = min(f.interval.low / f.base for f in judged)
    high = max(f.interval.high / f.base for f in judged)
    same_way = all(f.worse for f in judged) or not any(f.worse for f in judged)
    return ratio, (low, high), all(f.real for f in judged) and same_way


def largest_change(figures: list[Figure]) -> str:
    """The headline's body for bench: the figure that changed the most, as a speed."""
    changed = [f for f in figures if f.ratio is not None and f.real is not False]
    if not changed:
        return "no figure changed beyond the noise"
    top = max(changed, key=lambda f: abs(f.ratio - 1.0))
    speed = 1.0 / top.ratio
    return f"the largest change: {top.name}, {speed:.2f}x as fast" + ("" if top.real else " (not judged)")


class BenchComparable(Comparable):
    """Bench's side of a comparison: its repeats (independent: resampled in blocks of one), no step that its
    figures are parts of, its time per sample that of its training steps, and the largest change as the
    headline's body."""

    kind = BENCH_DOCUMENT

    def series(self, document: dict, parts: bool | None = None) -> list[Series]:
        return bench_series(document)

    def settings(self, document: dict) -> dict[str, str]:
        return {key: as_text(value) for key, value in (document.get("settings") or {}).items()}

    def sampled(self, document: dict) -> int:
        entries = [*document.get("kernels", []), *document.get("train_steps", [])]
        return min((len(entry.get("seconds") or []) for entry in entries), default=0)

    def method(self, counts: tuple[int, int]) -> str:
        return f"bootstrap of each figure's median over its repeats ({RESAMPLES} resamples), 95% intervals"

    def slower(self, figures: list[Figure]) -> tuple[float | None, tuple[float, float] | None, bool | None]:
        return training_ratio(figures)

    def headline_parts(self, lead: str, figures: list[Figure]) -> tuple[str, str, str | None]:
        return lead.replace("per sample", "per sample in its training steps"), largest_change(figures), None


BENCH = BenchComparable()
