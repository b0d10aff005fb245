"""From each run's series of samples to the figures of a comparison: matched by key, valued, and judged real or
not by the one engine (measure/difference.py), the same way for every command and for the doctor's pairs."""

from __future__ import annotations

import statistics as stats
from dataclasses import dataclass

from gpufeed.compare.model import Figure
from gpufeed.measure.difference import Samples, bootstrap_interval, is_real, pairs_interval


@dataclass(frozen=True)
class Series:
    """One figure of one run with its samples. `within_step`: a part of the step (its smallest change that
    counts is MIN_CHANGE of BASE's step time); else MIN_CHANGE of the figure's own BASE value."""

    key: str
    name: str
    unit: str
    level: int
    lower_is_better: bool
    samples: Samples
    within_step: bool = False


def _matched(base: list[Series], new: list[Series]) -> list[tuple[Series | None, Series | None]]:
    """Pairs of series by key in BASE's order; a series only NEW has goes right after the one before it in NEW's
    order (hand-over, with workers, under data wait), None standing for the run without it."""
    new_by_key = {series.key: series for series in new}
    matched = [(series, new_by_key.get(series.key)) for series in base]
    for index, series in enumerate(new):
        keys = [(first or second).key for first, second in matched]
        if series.key in keys:
            continue
        before = new[index - 1].key if index else None
        place = keys.index(before) + 1 if before in keys else (0 if before is None else len(matched))
        matched.insert(place, (None, series))
    return matched


def document_figures(base: list[Series], new: list[Series], step_ms: float | None,
                     bootstrap: bool = True) -> list[Figure]:
    """Figures of two saved runs: each run's value of each series, NEW - BASE's bootstrap interval where both
    have samples (`bootstrap`), judged against `step_ms` (BASE's step) for parts of the step."""
    figures = []
    for first, second in _matched(base, new):
        shown = first or second
        base_value = first.samples.value() if first else None
        new_value = second.samples.value() if second else None
        interval = (bootstrap_interval(first.samples, second.samples) if bootstrap and first and second
                    and base_value is not None and new_value is not None else None)
        figures.append(Figure(shown.key, shown.name, shown.unit, shown.level, shown.lower_is_better, base_value,
                              new_value, interval, is_real(interval, step_ms if shown.within_step else None)))
    return figures


def run_values(runs: list[list[Series]], key: str) -> list[float | None]:
    """Each run's value of the series `key` (None: that run has no such series)."""
    return [next((series.samples.value() for series in run if series.key == key), None) for run in runs]


def pair_figures(base_runs: list[list[Series]], new_runs: list[list[Series]], step_ms: float | None) -> list[Figure]:
    """Figures of runs made in pairs (base_runs[i] then new_runs[i]): each run's value, the medians over the runs
    as BASE and NEW, and the range of the pairs' differences as the interval (one pair: not computed)."""
    order = [first or second for first, second in _matched(base_runs[0], new_runs[0])]
    seen = {series.key for series in order}
    for run in [*base_runs, *new_runs]:
        for series in run:
            if series.key not in seen:
                seen.add(series.key)
                order.append(series)
    figures = []
    for shown in order:
        base_values, new_values = run_values(base_runs, shown.key), run_values(new_runs, shown.key)
        pairs = [(b, n) for b, n in zip(base_values, new_values, strict=True) if b is not None and n is not None]
        present_base = [v for v in base_values if v is not None]
        present_new = [v for v in new_values if v is not None]
        base_value = stats.median(present_base) if present_base else None
        new_value = stats.median(present_new) if present_new else None
        differences = [n - b for b, n in pairs]
        ratios = [n / b - 1.0 for b, n in pairs if b]
        interval = pairs_interval(differences, ratios if len(ratios) == len(differences) else [])
        figures.append(Figure(shown.key, shown.name, shown.unit, shown.level, shown.lower_is_better, base_value,
                              new_value, interval, is_real(interval, step_ms if shown.within_step else None)))
    return figures
