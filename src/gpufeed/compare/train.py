"""A train result's figures: throughput, time per sample, step time, data wait and compute (the rest of the
step: forward, backward and optimizer) from its per-step records (`per_step`, format 2), then device busy, the
final validation accuracy and loss, and the run's seconds (one value a run: compared without an interval). A
format-1 result has no per-step records: its throughput and data wait are the run's totals, compared without an
interval."""

from __future__ import annotations

import numpy as np

from gpufeed.compare.comparable import Comparable, as_text
from gpufeed.compare.figures import Series
from gpufeed.compare.model import Figure
from gpufeed.measure.difference import Samples
from gpufeed.report.kinds.train import TRAIN as TRAIN_DOCUMENT

# configuration keys that do not change what a step does (`explicit`: which flags were given)
KEYS_IGNORED = ("out", "resume", "log_every_steps", "checkpoint_every_steps", "explicit")


def _one(value) -> Samples:
    return Samples(np.array([float(value)]))


def per_step(document: dict) -> dict | None:
    """The per-step lists (wall_s, data_wait_s, samples), when the result has them and they agree in length."""
    record = document.get("per_step")
    if not isinstance(record, dict):
        return None
    columns = [record.get(key) for key in ("wall_s", "data_wait_s", "samples")]
    if not all(isinstance(column, list) and column for column in columns) or len({len(c) for c in columns}) != 1:
        return None
    return record


def train_series(document: dict) -> list[Series]:
    series = []
    record = per_step(document)
    if record is not None:
        wall = 1000.0 * np.array(record["wall_s"], dtype=float)
        wait = 1000.0 * np.array(record["data_wait_s"], dtype=float)
        samples = np.array(record["samples"], dtype=float)
        series += [Series("samples_per_s", "samples per second", "samples/s", 0, False, Samples(samples, wall / 1e3)),
                   Series("ms_per_sample", "time per sample", "ms a sample", 0, True, Samples(wall, samples)),
                   Series("step", "step", "ms a step", 0, True, Samples(wall)),
                   Series("data_wait", "data wait", "ms a step", 0, True, Samples(wait), within_step=True),
                   Series("compute", "compute", "ms a step", 0, True, Samples(wall - wait), within_step=True)]
    else:
        rate = document.get("samples_per_s")
        if rate:
            series += [Series("samples_per_s", "samples per second", "samples/s", 0, False, _one(rate)),
                       Series("ms_per_sample", "time per sample", "ms a sample", 0, True, _one(1000.0 / rate))]
    totals = (("data_wait_fraction", "data wait share", "of the time", True),
              ("device_busy_fraction", "device busy", "of the time", False),
              ("validation_accuracy", "validation accuracy", "of the samples", False),
              ("validation_loss", "validation loss", "", True), ("seconds", "run", "s", True))
    for key, name, unit, lower in totals:
        if document.get(key) is not None:
            series.append(Series(key, name, unit, 0, lower, _one(document[key])))
    return series


def step_ms(document: dict) -> float | None:
    record = per_step(document)
    return 1000.0 * float(np.mean(record["wall_s"])) if record else None


class TrainComparable(Comparable):
    """Train's side of a comparison: its per-step records, its configuration as its settings, and the final
    validation accuracy of both runs after the headline's parts."""

    kind = TRAIN_DOCUMENT

    def series(self, document: dict, parts: bool | None = None) -> list[Series]:
        return train_series(document)

    def settings(self, document: dict) -> dict[str, str]:
        config = document.get("config") or {}
        settings = {key: as_text(value) for key, value in config.items() if key not in KEYS_IGNORED}
        settings.update({"precision": as_text(document.get("precision")),
                         "world size": as_text(document.get("world_size")),
                         "batch size": as_text(document.get("effective_batch_size"))})
        return settings

    def sampled(self, document: dict) -> int:
        record = per_step(document)
        return len(record["wall_s"]) if record else 0

    def step_ms(self, document: dict) -> float | None:
        return step_ms(document)

    def step_times(self, document: dict) -> list[float]:
        record = per_step(document)
        return [1000.0 * value for value in record["wall_s"]] if record else []

    def headline_parts(self, lead: str, figures: list[Figure]) -> tuple[str, str, str | None]:
        lead, body, _ = super().headline_parts(lead, figures)
        accuracy = next((f for f in figures if f.key == "validation_accuracy" and f.difference is not None), None)
        extra = None if accuracy is None else \
            f"validation accuracy {accuracy.base:.1%} (BASE) and {accuracy.new:.1%} (NEW)"
        return lead, body, extra


TRAIN = TrainComparable()
