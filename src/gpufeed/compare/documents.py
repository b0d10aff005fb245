"""`compare_documents(BASE, NEW)`: two saved results of the same command (doctor, train or bench) side by side,
each difference judged real or not by a block bootstrap over their per-step records (statistics.py), and a
headline naming the part of the step that moved the most (headline.py)."""

from __future__ import annotations

from gpufeed.compare import bench, conditions, doctor, train
from gpufeed.compare.figures import Series, document_figures
from gpufeed.compare.headline import headline, parts_phrase, per_sample_phrase
from gpufeed.compare.model import Comparison, Figure, FindingChange
from gpufeed.errors import ConfigError
from gpufeed.measure.difference import RESAMPLES, block_steps
from gpufeed.report.document import load_document

COMMANDS = ("doctor", "train", "bench")


def load_pair(base_path: str, new_path: str) -> tuple[dict, dict]:
    """Both documents, checked (one-line errors): gpufeed results of a format this version reads, of the same
    command, one that compare knows."""
    base, new = load_document(base_path), load_document(new_path)
    first, second = base["about"]["command"], new["about"]["command"]
    for path, command in ((base_path, first), (new_path, second)):
        if command not in COMMANDS:
            raise ConfigError(f"{path} is a {command} result; gpufeed compare reads doctor, train and bench results")
    if first != second:
        raise ConfigError(f"{base_path} is a {first} result and {new_path} a {second} result: compare two results "
                          f"of the same command")
    return base, new


def series_of(command: str, document: dict, parts: bool | None = None) -> list[Series]:
    if command == "doctor":
        return doctor.doctor_series(document, parts)
    return train.train_series(document) if command == "train" else bench.bench_series(document)


def step_ms_of(command: str, document: dict) -> float | None:
    return {"doctor": doctor.step_ms, "train": train.step_ms}.get(command, lambda _: None)(document)


def sampled(command: str, document: dict) -> int:
    """Per-step (or per-repeat) records the result holds for the bootstrap: 0 when it has none."""
    if command == "doctor":
        return len(doctor.steps_of(document))
    if command == "train":
        record = train.per_step(document)
        return len(record["wall_s"]) if record else 0
    entries = [*document.get("kernels", []), *document.get("train_steps", [])]
    return min((len(entry.get("seconds") or []) for entry in entries), default=0)


def slower_of(command: str, figures: list[Figure]) -> tuple[float | None, tuple[float, float] | None, bool | None]:
    """NEW's time per sample over BASE's, minus 1, its interval as ratios, and whether it is real."""
    if command == "bench":
        return bench.training_ratio(figures)
    figure = next((f for f in figures if f.key == "ms_per_sample"), None) or \
        next((f for f in figures if f.key == "step"), None)
    if figure is None or figure.ratio is None:
        return None, None, None
    interval = figure.interval
    ratios = (interval.ratio_low, interval.ratio_high) if interval and interval.ratio_low is not None else None
    return figure.ratio - 1.0, ratios, figure.real


def method_text(command: str, base: dict, new: dict) -> tuple[str, list[str]]:
    """How the differences are judged, and the notes on what could not be."""
    counts = sampled(command, base), sampled(command, new)
    notes = []
    for name, document, count in (("BASE", base, counts[0]), ("NEW", new, counts[1])):
        if count < 2:
            version = document["about"].get("format")
            notes.append(f"{name} has no per-step samples (format {version}): compared on its totals, and whether "
                         f"the differences are real could not be computed; run it again with this gpufeed")
    if min(counts) < 2:
        return "totals only (a result without per-step samples)", notes
    if command == "bench":
        return (f"bootstrap of each figure's median over its repeats ({RESAMPLES} resamples), 95% intervals",
                notes)
    blocks = f"{block_steps(counts[0])} and {block_steps(counts[1])}"
    return (f"block bootstrap over the per-step records ({counts[0]} and {counts[1]} steps, {RESAMPLES} resamples "
            f"in blocks of {blocks} consecutive steps), 95% intervals", notes)


def doctor_extras(base: dict, new: dict) -> tuple[list[FindingChange], tuple, list[str]]:
    first, second = doctor.findings_of(base), doctor.findings_of(new)
    kinds = list(dict.fromkeys([*first, *second]))
    changes = [FindingChange(kind, first.get(kind), second.get(kind)) for kind in kinds]
    notes = []
    base_parts, new_parts = doctor.has_parts(doctor.steps_of(base)), doctor.has_parts(doctor.steps_of(new))
    if base_parts != new_parts:
        which = "BASE" if not base_parts else "NEW"
        notes.append(f"{which} has no forward, backward and optimizer per step (format 1, or its model and optimizer "
                     f"were not found): both runs' compute is compared as one part")
    return changes, (base["verdict"].get("primary"), new["verdict"].get("primary")), notes


def distributions_of(command: str, base: dict, new: dict) -> dict:
    """Each run's step times (ms), for the page's distributions."""
    def steps(document):
        if command == "doctor":
            return [1000.0 * step["wall_s"] for step in doctor.steps_of(document)]
        record = train.per_step(document) if command == "train" else None
        return [1000.0 * value for value in record["wall_s"]] if record else []
    first, second = steps(base), steps(new)
    return {"unit": "ms a step", "base": first, "new": second} if first and second else {}


def train_extra(figures: list[Figure]) -> str | None:
    accuracy = next((f for f in figures if f.key == "validation_accuracy" and f.difference is not None), None)
    if accuracy is None:
        return None
    return f"validation accuracy {accuracy.base:.1%} (BASE) and {accuracy.new:.1%} (NEW)"


def bench_parts(figures: list[Figure]) -> str:
    changed = [f for f in figures if f.ratio is not None and f.real is not False]
    if not changed:
        return "no figure changed beyond the noise"
    top = max(changed, key=lambda f: abs(f.ratio - 1.0))
    speed = 1.0 / top.ratio
    return f"the largest change: {top.name}, {speed:.2f}x as fast" + ("" if top.real else " (not judged)")


def compare_documents(base: dict, new: dict, base_name: str = "BASE", new_name: str = "NEW") -> Comparison:
    """Two checked results of the same command (load_pair)."""
    command = base["about"]["command"]
    parts = None
    if command == "doctor":  # split the compute only when both runs have the split
        parts = doctor.has_parts(doctor.steps_of(base)) and doctor.has_parts(doctor.steps_of(new))
    method, notes = method_text(command, base, new)
    bootstrap = not notes
    figures = document_figures(series_of(command, base, parts), series_of(command, new, parts),
                               step_ms_of(command, base), bootstrap=bootstrap)
    lines, across = conditions.differences(command, base, new)
    findings, verdicts = [], (None, None)
    if command == "doctor":
        findings, verdicts, more = doctor_extras(base, new)
        notes += more
    slower, interval, real = slower_of(command, figures)
    lead = per_sample_phrase(slower, interval, real, method if notes else "")
    if command == "bench":
        lead = lead.replace("per sample", "per sample in its training steps")
        body = bench_parts(figures)
    else:
        body = parts_phrase(figures)
    machines = None
    if across:
        first, second = conditions.machine_of(base), conditions.machine_of(new)
        machines = f"BASE {first['CPU']}, {first['GPUs']}; NEW {second['CPU']}, {second['GPUs']}"
    text = headline(lead, body, machines, train_extra(figures) if command == "train" else None)
    return Comparison(command, "documents", base_name, new_name, text, method, slower, interval, real, lines, across,
                      figures, findings, verdicts, notes, distributions_of(command, base, new))


def compare_files(base_path: str, new_path: str) -> Comparison:
    base, new = load_pair(base_path, new_path)
    return compare_documents(base, new, str(base_path), str(new_path))
