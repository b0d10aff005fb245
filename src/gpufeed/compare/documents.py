"""`compare_documents(BASE, NEW)`: two saved results of the same command (one compare/kinds.py lists) side by
side, each difference judged real or not by a block bootstrap over their per-step records (measure/difference.py), and
a headline naming the part of the step that moved the most (headline.py). What differs from one kind to another
is its Comparable's (comparable.py); nothing here tests a kind's name."""

from __future__ import annotations

from gpufeed.compare import conditions
from gpufeed.compare.comparable import Comparable
from gpufeed.compare.doctor import DOCTOR
from gpufeed.compare.figures import document_figures
from gpufeed.compare.headline import headline, per_sample_phrase
from gpufeed.compare.kinds import COMPARABLE
from gpufeed.compare.model import Comparison, Figure, FindingChange
from gpufeed.errors import ConfigError
from gpufeed.report.document import load_document


def _names() -> str:
    """The commands compare reads, in words: "doctor, train and bench"."""
    *first, last = COMPARABLE
    return f"{', '.join(first)} and {last}" if first else last


def load_pair(base_path: str, new_path: str) -> tuple[dict, dict]:
    """Both documents, checked (one-line errors): gpufeed results of a format this version reads, of the same
    command, one that compare knows."""
    base, new = load_document(base_path), load_document(new_path)
    first, second = base["about"]["command"], new["about"]["command"]
    for path, command in ((base_path, first), (new_path, second)):
        if command not in COMPARABLE:
            raise ConfigError(f"{path} is a {command} result; gpufeed compare reads {_names()} results")
    if first != second:
        raise ConfigError(f"{base_path} is a {first} result and {new_path} a {second} result: compare two results "
                          f"of the same command")
    return base, new


def slower_of(command: str, figures: list[Figure]) -> tuple[float | None, tuple[float, float] | None, bool | None]:
    """NEW's time per sample over BASE's, minus 1, its interval as ratios, and whether it is real."""
    return COMPARABLE[command].slower(figures)


def doctor_extras(base: dict, new: dict) -> tuple[list[FindingChange], tuple, list[str]]:
    """Two doctor results' findings side by side, their verdicts, and the notes on their parts (pairs.py)."""
    return DOCTOR.verdicts(base, new)


def method_text(comparable: Comparable, base: dict, new: dict) -> tuple[str, list[str]]:
    """How the differences are judged, and the notes on what could not be."""
    counts = comparable.sampled(base), comparable.sampled(new)
    notes = []
    for name, document, count in (("BASE", base, counts[0]), ("NEW", new, counts[1])):
        if count < 2:
            version = document["about"].get("format")
            notes.append(f"{name} has no per-step samples (format {version}): compared on its totals, and whether "
                         f"the differences are real could not be computed; run it again with this gpufeed")
    if min(counts) < 2:
        return "totals only (a result without per-step samples)", notes
    return comparable.method(counts), notes


def distributions_of(comparable: Comparable, base: dict, new: dict) -> dict:
    """Each run's step times (ms), for the page's distributions."""
    first, second = comparable.step_times(base), comparable.step_times(new)
    return {"unit": "ms a step", "base": first, "new": second} if first and second else {}


def compare_documents(base: dict, new: dict, base_name: str = "BASE", new_name: str = "NEW") -> Comparison:
    """Two checked results of the same command (load_pair)."""
    command = base["about"]["command"]
    comparable = COMPARABLE[command]
    parts = comparable.split(base, new)
    method, notes = method_text(comparable, base, new)
    figures = document_figures(comparable.series(base, parts), comparable.series(new, parts),
                               comparable.step_ms(base), bootstrap=not notes)
    lines, across = conditions.differences(command, base, new)
    findings, verdicts, more = comparable.verdicts(base, new)
    notes += more
    slower, interval, real = comparable.slower(figures)
    lead, body, extra = comparable.headline_parts(per_sample_phrase(slower, interval, real, method if notes else ""),
                                                  figures)
    machines = None
    if across:
        first, second = conditions.machine_of(base), conditions.machine_of(new)
        machines = f"BASE {first['CPU']}, {first['GPUs']}; NEW {second['CPU']}, {second['GPUs']}"
    return Comparison(command, "documents", base_name, new_name, headline(lead, body, machines, extra), method,
                      slower, interval, real, lines, across, figures, findings, verdicts, notes,
                      distributions_of(comparable, base, new))


def compare_files(base_path: str, new_path: str) -> Comparison:
    base, new = load_pair(base_path, new_path)
    return compare_documents(base, new, str(base_path), str(new_path))
