"""The doctor's A/B mode: a baseline training and a new one run alternately, each in its own process, and one
comparison of them.

Shared CI machines swing by tens of percent between minutes, so two results saved at different times differ by
the machine as much as by the change. Here the two run in turns: first one untimed run of the baseline (it warms
the page cache and the imports; its figures are not used), then `pairs` pairs, BASE then NEW, then NEW then BASE,
alternating (so a machine that slows down steadily does not favour either). Each run is `python -m gpufeed doctor
--json` on the script in a fresh process (two checkouts must not share imported modules), watching the same steps
with the profiled window off. Each figure's BASE and NEW are the medians over their runs; its interval is the
range of the pairs' differences, as `--try` reports its pairs: a change is real when every pair moved the same
way (and by at least MIN_CHANGE); one pair has no spread, so its significance is not computed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufeed.compare import conditions, doctor
from gpufeed.compare.documents import doctor_extras, slower_of
from gpufeed.compare.figures import pair_figures, run_values
from gpufeed.compare.headline import headline, parts_phrase, per_sample_phrase
from gpufeed.compare.model import Comparison
from gpufeed.errors import RunFailed
from gpufeed.report.document import check_document


@dataclass(frozen=True)
class Side:
    """One side of the comparison: the script (or module) and its arguments, run from `cwd`."""

    target: str
    args: tuple[str, ...]
    is_module: bool = False

    def words(self) -> list[str]:
        return [*(["-m"] if self.is_module else []), self.target, *self.args]


@dataclass(frozen=True)
class Watch:
    """What each run watches (the doctor's own flags)."""

    steps: int = 50
    warmup: int = 5
    timeout_s: float = 60.0
    nproc_per_node: int | None = None


def run_doctor(side: Side, watch: Watch, folder: Path, name: str) -> dict:
    """One run: `gpufeed doctor --json` in a new process; its checked document."""
    output = folder / f"{name}.json"
    command = [sys.executable, "-m", "gpufeed", "doctor", "--steps", str(watch.steps), "--warmup", str(watch.warmup),
               "--profile-steps", "0", "--timeout", f"{watch.timeout_s:g}", "--json", str(output)]
    if watch.nproc_per_node:
        command += ["--nproc-per-node", str(watch.nproc_per_node)]
    done = subprocess.run([*command, *side.words()], capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0 or not output.is_file():
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {done.returncode}"
        raise RunFailed(f"the {name} run of `{' '.join(side.words())}` failed (exit status {done.returncode}): "
                        f"{last}")
    document = check_document(json.loads(output.read_text(encoding="utf-8")), f"the {name} run's result")
    if not doctor.steps_of(document):
        raise RunFailed(f"the {name} run of `{' '.join(side.words())}` watched no training step: "
                        f"{'; '.join(document.get('unmeasured', [])[:1]) or 'see gpufeed doctor on it alone'}")
    return document


def order(pairs: int) -> list[tuple[int, str]]:
    """(pair, side) in the order run: the warm-up baseline (pair -1), then BASE, NEW, NEW, BASE, BASE, NEW, ..."""
    runs = [(-1, "base")]
    for pair in range(pairs):
        runs += [(pair, "base"), (pair, "new")] if pair % 2 == 0 else [(pair, "new"), (pair, "base")]
    return runs


def run_pairs(base: Side, new: Side, pairs: int = 3, watch: Watch = Watch(),
              on_run: Callable[[int, int, str], None] | None = None) -> tuple[Comparison, list[dict], list[dict]]:
    """Run the pairs and compare them; the comparison, and each side's documents in pair order. `on_run(done,
    total, what)` is told before each run (the command line prints it)."""
    if pairs < 1:
        raise ValueError(f"pairs must be at least 1, got {pairs}")
    documents: dict[str, list] = {"base": [None] * pairs, "new": [None] * pairs}
    planned = order(pairs)
    with tempfile.TemporaryDirectory(prefix="gpufeed-ab-") as folder:
        for number, (pair, side) in enumerate(planned):
            label = "warm-up (baseline, not counted)" if pair < 0 else f"pair {pair + 1}: {side.upper()}"
            if on_run is not None:
                on_run(number, len(planned), label)
            name = "warm-up" if pair < 0 else f"{side}-{pair + 1}"
            document = run_doctor(base if side == "base" else new, watch, Path(folder), name)
            if pair >= 0:
                documents[side][pair] = document
    return compare_pairs(documents["base"], documents["new"], base, new), documents["base"], documents["new"]


def compare_pairs(base_runs: list[dict], new_runs: list[dict], base: Side, new: Side) -> Comparison:
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
    method = (f"{len(base_runs)} pairs of runs made alternately, each in its own process after a warm-up run; "
              f"BASE and NEW are the medians over their runs, a change is real when every pair moved the same way")
    base_series = [doctor.doctor_series(d, parts) for d in base_runs]
    new_series = [doctor.doctor_series(d, parts) for d in new_runs]
    key = "ms_per_sample" if any(s.key == "ms_per_sample" for s in base_series[0]) else "step"
    per_pair = [{"pair": index + 1, "key": key, "base": one, "new": other,
                 "ratio": None if not one or other is None else other / one}
                for index, (one, other) in enumerate(zip(run_values(base_series, key), run_values(new_series, key),
                                                         strict=True))]
    steps = {side: [1000.0 * s["wall_s"] for d in runs for s in doctor.steps_of(d)]
             for side, runs in (("base", base_runs), ("new", new_runs))}
    return Comparison("doctor", "pairs", " ".join(base.words()), " ".join(new.words()), text, method, slower,
                      interval, real, lines, across, figures, findings, verdicts, notes,
                      {"unit": "ms a step", **steps}, per_pair)
