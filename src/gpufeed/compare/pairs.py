"""The doctor's A/B mode: a baseline training and a new one run alternately, each in its own process, and one
comparison of them.

Shared CI machines swing by tens of percent between minutes, so two results saved at different times differ by
the machine as much as by the change. Here the two run in turns (doctor/runs/pairs.py, the loop `--try` runs its
pairs on too): first one untimed run of the baseline (it warms the page cache and the imports; its figures are not
used), then `pairs` pairs in ABBA order, BASE NEW, NEW BASE, ... (so a machine that slows down steadily favours
neither). Each run is `python -m gpufeed doctor --json` on the script in a fresh process (doctor/runs/process.py:
two checkouts must not share imported modules), watching the same steps with the profiled window off. Each figure's
BASE and NEW are the medians over their runs; its interval is the range of the pairs' differences, judged by
measure/difference.py's rule as every paired judgement is; one pair has no spread, so it is not judged.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from gpufeed.compare import conditions, doctor
from gpufeed.compare.documents import doctor_extras, slower_of
from gpufeed.compare.figures import pair_figures, run_values
from gpufeed.compare.headline import headline, parts_phrase, per_sample_phrase
from gpufeed.compare.model import Comparison
from gpufeed.doctor.runs.pairs import run_pairs
from gpufeed.doctor.runs.process import InSubprocess
from gpufeed.doctor.runs.script import DEFAULT_SETTINGS, Script, WatchSettings
from gpufeed.errors import RunFailed
from gpufeed.measure.difference import MIN_CHANGE
from gpufeed.report.document import check_document


def run_ab(base: Script, new: Script, pairs: int = 3, settings: WatchSettings = DEFAULT_SETTINGS,
           nproc_per_node: int | None = None,
           on_run: Callable[[int, int, str], None] | None = None) -> tuple[Comparison, list[dict], list[dict]]:
    """Run the pairs and compare them; the comparison, and each side's documents in pair order. `on_run(done,
    total, what)` is told before each run (the command line prints it). A failed run raises RunFailed."""
    counts = {"base": 0, "new": 0}
    with tempfile.TemporaryDirectory(prefix="gpufeed-ab-") as folder:
        runner = InSubprocess(Path(folder), nproc_per_node)

        def run(side: str):
            name = "warm-up" if side == "base" and counts["base"] == 0 else \
                f"{side}-{counts[side] + (side == 'new')}"
            counts[side] += 1
            return runner(base if side == "base" else new, settings, name=name)

        done = run_pairs(run, pairs, warm_up=True, on_run=on_run)
    if done.problem is not None:
        raise RunFailed(done.problem)
    documents = {side: [check_document(pair[index].document, f"the {side}-{number + 1} run's result")
                        for number, pair in enumerate(done.runs)] for index, side in enumerate(("base", "new"))}
    return compare_pairs(documents["base"], documents["new"], base, new), documents["base"], documents["new"]


def compare_pairs(base_runs: list[dict], new_runs: list[dict], base: Script, new: Script) -> Comparison:
    """The comparison of doctor results made in pairs (base_runs[i] with new_runs[i])."""
    parts = all(doctor.has_parts(doctor.steps_of(d)) for d in [*base_runs, *new_runs])
    figures = pair_figures([doctor.doctor_series(d, parts) for d in base_runs],
                           [doctor.doctor_series(d, parts) for d in new_runs], doctor.step_ms(base_runs[0]))
    figures = [f for f in figures if not f.key.startswith("rank ")] + \
        [f for f in figures if f.key.startswith("rank ")]
    lines, across = conditions.differences("doctor", base_runs[0], new_runs[0], command_lines=False)
    findings, verdicts, notes = doctor_extras(base_runs[0], new_runs[0])
    notes = [*notes, "findings and verdicts: those of the first pair"]
    slower, interval, real = slower_of("doctor", figures)
    why = "one pair has no spread: give --pairs 2 or more" if len(base_runs) < 2 else ""
    text = headline(per_sample_phrase(slower, interval, real, why), parts_phrase(figures))
    method = (f"{len(base_runs)} pairs of runs made alternately (ABBA), each in its own process after a warm-up "
              f"run; BASE and NEW are the medians over their runs, a change is real when every pair moved the same "
              f"way by at least {MIN_CHANGE:.0%}")
    base_series = [doctor.doctor_series(d, parts) for d in base_runs]
    new_series = [doctor.doctor_series(d, parts) for d in new_runs]
    key = "ms_per_sample" if any(s.key == "ms_per_sample" for s in base_series[0]) else "step"
    per_pair = [{"pair": index + 1, "key": key, "base": one, "new": other,
                 "ratio": None if not one or other is None else other / one}
                for index, (one, other) in enumerate(zip(run_values(base_series, key), run_values(new_series, key),
                                                         strict=True))]
    steps = {side: [1000.0 * s["wall_s"] for d in runs for s in doctor.steps_of(d)]
             for side, runs in (("base", base_runs), ("new", new_runs))}
    return Comparison("doctor", "pairs", base.named(), new.named(), text, method, slower,
                      interval, real, lines, across, figures, findings, verdicts, notes,
                      {"unit": "ms a step", **steps}, per_pair)
