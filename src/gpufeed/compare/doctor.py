"""A doctor result's figures, from its watched steps (`timeline.steps`, one record per step) and, on several
ranks, each rank's means (`ranks`).

The parts of a step (level 0, ms a step): data wait, loop input (a loop building its own batches, no DataLoader:
`loop_input_s`, absent before issue 32), copies, syncs, forward, backward and optimizer; their sum is the step's
wall time (backward is the rest of the step's compute: the loss, the backward pass, zero_grad and the loop's own
Python). A result without forward, backward and optimizer per step (format 1, or a loop whose model and optimizer
the doctor did not find) has one "compute" part instead: wall time less data wait, loop input, copies and syncs.
Inside data wait (level 1, ms a batch): the DataLoader's getitem, collate, hand-over and pin, where measured.
A part that is zero in every step of a run (copies and syncs on the CPU, where the doctor does not time them) is
not a figure of that run.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpufeed.compare.comparable import Comparable, as_text
from gpufeed.compare.figures import Series
from gpufeed.compare.model import FindingChange
from gpufeed.measure.difference import Samples
from gpufeed.report.kinds.doctor import DOCTOR as DOCTOR_DOCUMENT

TOKENS = (("tokens_per_s", "token positions per second", "tokens"),
          ("real_tokens_per_s", "real tokens per second", "real_tokens"))
PARTS = (("data_wait", "data wait", "data_wait_s"), ("loop_input", "loop input", "loop_input_s"),
         ("copies", "copies", "copy_s"), ("syncs", "syncs", "sync_s"), ("forward", "forward", "forward_s"),
         ("backward", "backward", "backward_s"), ("optimizer", "optimizer", "optimizer_s"))
COMPUTE_PARTS = ("forward_s", "backward_s", "optimizer_s")  # with neither result split, one `compute` instead
LOADER_PARTS = (("getitem", "getitem", "getitem_s"), ("collate", "collate", "collate_s"),
                ("handover", "hand-over", "handover_s"), ("pin", "pin", "pin_s"))
RANK_FIGURES = (("step_ms", "step"), ("data_wait_ms", "data wait"), ("forward_ms", "forward"),
                ("backward_ms", "backward"), ("optimizer_ms", "optimizer"), ("collective_ms", "all-reduce in flight"),
                ("exposed_ms", "all-reduce waited"))


def _column(steps: list[dict], key: str, scale: float = 1.0) -> np.ndarray:
    return np.array([np.nan if step.get(key) is None else scale * float(step[key]) for step in steps], dtype=float)


def steps_of(document: dict) -> list[dict]:
    return list((document.get("timeline") or {}).get("steps") or [])


def has_parts(steps: list[dict]) -> bool:
    """The steps carry forward, backward and optimizer (format 2, with the model and optimizer found)."""
    return bool(steps) and all(step.get("forward_s") is not None for step in steps)


def per_sample(steps: list[dict]) -> bool:
    """Every step's batch size is known, so figures can be per sample (else per step)."""
    return bool(steps) and all(step.get("batch_size") for step in steps)


def doctor_series(document: dict, parts: bool | None = None) -> list[Series]:
    """The figures of one doctor result, with their per-step samples. `parts`: split the compute into forward,
    backward and optimizer (None: when this result has them; a comparison passes whether both have)."""
    steps = steps_of(document)
    if not steps:
        return []
    wall = _column(steps, "wall_s", 1000.0)
    series = []
    if per_sample(steps):
        batch = _column(steps, "batch_size")
        series += [Series("ms_per_sample", "time per sample", "ms a sample", 0, True, Samples(wall, batch)),
                   Series("samples_per_s", "samples per second", "samples/s", 0, False,
                          Samples(batch, wall / 1000.0))]
    for key, name, field in TOKENS:  # token batches (absent before issue 32): every step counted them
        if all(step.get(field) is not None for step in steps):
            series.append(Series(key, name, "tokens/s", 0, False, Samples(_column(steps, field), wall / 1000.0)))
    series.append(Series("step", "step", "ms a step", 0, True, Samples(wall)))
    split = has_parts(steps) if parts is None else parts
    for key, name, field in PARTS:
        if field in COMPUTE_PARTS and not split:
            continue
        column = _column(steps, field, 1000.0)
        if np.nansum(np.abs(column)) == 0.0:
            continue
        series.append(Series(key, name, "ms a step", 0, True, Samples(column), within_step=True))
        if key == "data_wait":
            series += _loader_series(steps)
    if not split:
        rest = wall - sum(np.nan_to_num(_column(steps, field, 1000.0)) for _, _, field in PARTS
                          if field not in COMPUTE_PARTS)
        series.append(Series("compute", "compute", "ms a step", 0, True, Samples(rest), within_step=True))
    return series + _rank_series(document)


def _loader_series(steps: list[dict]) -> list[Series]:
    splits = [step.get("loader_split") or {} for step in steps]
    if not any(splits):
        return []
    batches = np.array([split.get("batches") or np.nan for split in splits], dtype=float)
    found = []
    for key, name, field in LOADER_PARTS:
        column = _column(splits, field, 1000.0)
        if np.all(np.isnan(column)) or np.nansum(np.abs(column)) == 0.0:
            continue
        found.append(Series(key, name, "ms a batch", 1, True, Samples(column, batches), within_step=True))
    return found


def _rank_series(document: dict) -> list[Series]:
    """Each rank's means per step (no per-step samples: compared on the means, without an interval)."""
    found = []
    for rank in document.get("ranks") or []:
        for field, name in RANK_FIGURES:
            value = rank.get(field)
            if value is None or (field != "step_ms" and not value):
                continue
            found.append(Series(f"rank {rank['rank']} {field[:-3]}", f"rank {rank['rank']} {name}", "ms a step", 1,
                                True, Samples(np.array([float(value)])), within_step=True))
    return found


def step_ms(document: dict) -> float | None:
    """Mean wall time of a watched step, ms (what MIN_CHANGE of a part is taken of)."""
    steps = steps_of(document)
    return 1000.0 * sum(step["wall_s"] for step in steps) / len(steps) if steps else None


def findings_of(document: dict) -> dict[str, str]:
    """{kind: severity} of a doctor result's findings."""
    return {finding["kind"]: finding["severity"] for finding in document.get("findings") or []}


class DoctorComparable(Comparable):
    """The doctor's side of a comparison: its watched steps split into parts, its settings (batch size, world
    size, device), and both runs' verdicts and findings."""

    kind = DOCTOR_DOCUMENT

    def series(self, document: dict, parts: bool | None = None) -> list[Series]:
        return doctor_series(document, parts)

    def settings(self, document: dict) -> dict[str, str]:
        sizes = Counter(step.get("batch_size") for step in steps_of(document) if step.get("batch_size"))
        verdict = document.get("verdict") or {}
        return {"batch size": as_text(sizes.most_common(1)[0][0] if sizes else None),
                "world size": as_text(verdict.get("world_size", 1)), "device": as_text(verdict.get("device"))}

    def sampled(self, document: dict) -> int:
        return len(steps_of(document))

    def step_ms(self, document: dict) -> float | None:
        return step_ms(document)

    def step_times(self, document: dict) -> list[float]:
        return [1000.0 * step["wall_s"] for step in steps_of(document)]

    def split(self, base: dict, new: dict) -> bool | None:
        """Split the compute only when both runs have the split."""
        return has_parts(steps_of(base)) and has_parts(steps_of(new))

    def verdicts(self, base: dict, new: dict) -> tuple[list[FindingChange], tuple, list[str]]:
        first, second = findings_of(base), findings_of(new)
        kinds = list(dict.fromkeys([*first, *second]))
        changes = [FindingChange(kind, first.get(kind), second.get(kind)) for kind in kinds]
        notes = []
        base_parts, new_parts = has_parts(steps_of(base)), has_parts(steps_of(new))
        if base_parts != new_parts:
            which = "BASE" if not base_parts else "NEW"
            notes.append(f"{which} has no forward, backward and optimizer per step (format 1, or its model and "
                         f"optimizer were not found): both runs' compute is compared as one part")
        return changes, (base["verdict"].get("primary"), new["verdict"].get("primary")), notes


DOCTOR = DoctorComparable()
