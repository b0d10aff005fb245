"""The finding modules (gpufeed.doctor.findings): one per kind of the documented vocabulary, each with the same
interface, none loading torch (the page reads their meanings), and the notes they add typed by what they say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from observations import host, on_cpu, on_gpu, steps

from gpufeed.doctor.findings import KINDS
from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.experiments import NO_EXPERIMENT
from gpufeed.doctor.findings.kind import Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Note
from gpufeed.doctor.trials.plan import experiments_for

DESIGN = Path(__file__).parents[2] / "docs" / "design.md"


def vocabulary() -> list[tuple[str, str, str]]:
    """(kind, where it lives, experiment) for each row of docs/design.md's vocabulary table, in order."""
    section = DESIGN.read_text(encoding="utf-8").split("## The doctor's vocabulary", 1)[1].split("\n## ", 1)[0]
    return [(kind, where, tried) for kind, where, tried in
            re.findall(r"^\| `(\w+)` \| [^|]+ \| ([^|]+) \| ([^|]+) \|$", section, flags=re.MULTILINE)]


def test_the_kinds_are_the_documented_vocabulary_one_module_each() -> None:
    rows = vocabulary()
    assert KINDS.names == tuple(kind for kind, _, _ in rows) and len(KINDS) == 14
    for kind, (name, where, _) in zip(KINDS, rows, strict=True):
        module = sys.modules[type(kind).__module__]
        assert isinstance(kind, Kind) and module.__name__ == f"gpufeed.doctor.findings.kinds.{name}"
        assert kind.NAME == name and where.startswith(f"findings/kinds/{name}.py") and callable(module.fix)
        assert isinstance(kind.MEANING, str) and kind.MEANING and KINDS.meaning(name, "") == kind.MEANING
        # shares.py: each kind names the part of the step it claims (or claims no time) and its level, with its source
        assert kind.PART is not None or type(kind).claims is not Kind.claims or kind.CLAIMS_TIME is False
        assert kind.RECOMMEND_AT is None or 0.0 < kind.RECOMMEND_AT < 1.0
        assert isinstance(kind.RECOMMEND_SOURCE, str) and kind.RECOMMEND_SOURCE
        assert 1 <= len(kind.FIGURES) <= 3 and all(other in KINDS for other in kind.YIELDS_TO)
    assert [kind.NAME for kind in KINDS if kind.HEALTHY] == ["compute_bound"]


def test_the_kinds_documented_without_an_experiment_try_none() -> None:
    for kind, _, tried in vocabulary():
        finding = Finding(kind, "high", 0.5, {}, "fix", "snippet", None, "high")
        found, reason = experiments_for(finding, True)
        assert (tried == "none") is (found == [] and reason == NO_EXPERIMENT), kind


def test_a_finding_of_another_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown finding kind 'input_bond'"):
        Finding("input_bond", "high", 0.5, {}, "fix", "snippet", None, "high")


def test_neither_the_findings_nor_the_page_load_torch() -> None:
    code = ("import sys, gpufeed.doctor.findings, gpufeed.doctor.findings.diagnose, gpufeed.report.doctor_page; "
            "print('torch' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "False"


def test_notes_say_whether_they_are_about_the_run_or_a_missing_reading() -> None:
    report = diagnose(on_cpu(steps(20), host(), workers=None, notes=("GPU utilization: NVML not found",)))
    kinds = {note.subject: note.kind for note in report.notes}
    assert kinds["periodic stalls"] == "run"  # 20 steps cannot show a beat longer than 10: how the run was read
    assert kinds["GPU utilization"] == "unmeasured" and kinds["operators and kernel launches"] == "unmeasured"
    document = report.to_json()
    assert document["unmeasured"] == [note.text for note in report.notes]  # every line, as before notes were typed
    assert document["notes"] == [note.text for note in report.notes if note.kind == "run"] != []


def test_a_subject_already_noted_is_not_noted_again() -> None:
    report = diagnose(on_gpu(steps(20, compute=0.03), host(), notes=("autocast: read elsewhere",),
                             autocast_seen=None))
    assert [note for note in report.notes if note.subject == "autocast"] == [
        Note("unmeasured", "autocast: read elsewhere")]
