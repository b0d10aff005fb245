"""A finding kind is a declared contract (doctor/findings/kind.py), and adding one is its module, one registry line
and its vocabulary row (docs/design.md, "How to add a thing"). A throwaway kind defined here, registered for these
tests only (`registered`: the registry line), reaches the diagnosed report, the doctor's page, the terminal and the
--try plan with no other file changed; without the line it reaches none of them. A kind that leaves out part of
its contract is refused when it is defined, and the typed views of the kinds' evidence read keys their detection
writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from observations import by_kind, host, on_cpu, on_gpu, steps
from test_worker_memory import reading

from gpufeed.cli.doctor_show import show
from gpufeed.cli.output import console
from gpufeed.doctor.findings import KINDS
from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.experiments import Declared, LoaderChange
from gpufeed.doctor.findings.grading import new_finding, severity
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.kinds.host_to_device import HostToDeviceEvidence
from gpufeed.doctor.findings.kinds.input_bound import InputBoundEvidence
from gpufeed.doctor.findings.kinds.precision import PrecisionEvidence
from gpufeed.doctor.findings.kinds.worker_memory import WorkerMemoryEvidence
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Note
from gpufeed.doctor.trials.plan import plan_experiments
from gpufeed.report.doctor_page import doctor_page

ABOUT = json.loads((Path(__file__).parents[1] / "report" / "fixtures" / "doctor.json").read_text())["about"]
NAME = "throwaway_stall"


class ThrowawayStall(Kind):
    """Every watched step stalls for 30% of its time: what a new kind's module declares, and nothing more."""

    NAME = NAME
    MEANING = "a kind this test defines and registers for itself"
    PART = "step"
    RECOMMEND_AT = 0.05
    RECOMMEND_SOURCE = "this test's choice"
    FIGURES = ("stalled_share",)

    def detect(self, seen, notes, judged: Judged) -> Finding | None:
        share = 0.3
        evidence = {"stalled_share": share, "steps_seen": seen.totals.steps}
        return new_finding(self.NAME, severity(share), share, evidence, ("Unstall the throwaway.", "unstall()"),
                           "high")

    def timeline(self, seen) -> dict | None:
        return {"steps_seen": seen.totals.steps}

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        return [LoaderChange("three_workers", workers=3)], "unstalling it has no experiment of its own"


@pytest.fixture
def registered():
    kind = ThrowawayStall()
    KINDS.register(kind)  # the registry line, for this test only
    try:
        yield kind
    finally:
        KINDS.unregister(NAME)


def terminal(report) -> str:
    """What `gpufeed doctor` prints for `report` (cli/doctor_show.py)."""
    with console.capture() as captured:
        show(report, True, None, report.notes)
    return captured.get()


def test_a_registered_kind_reaches_the_report_the_page_the_terminal_and_the_plan(registered) -> None:
    report = diagnose(on_cpu(steps(20), host()))
    found = by_kind(report)[NAME]
    assert report.verdict.primary == NAME and report.verdict.share == pytest.approx(0.3)
    assert found.severity == "high" and found.evidence == {"stalled_share": 0.3, "steps_seen": 20}
    assert report.timeline[NAME] == {"steps_seen": 20}
    document = json.loads(json.dumps(report.to_json()))  # as saved
    page = doctor_page({**document, "about": ABOUT}).render()
    assert f"gpufeed doctor: {NAME}" in page and f"{NAME} means: {ThrowawayStall.MEANING}." in page
    assert "What to do first: Unstall the throwaway." in page and "unstall()" in page
    printed = terminal(report)
    assert f"verdict: {NAME}: 30% of the step (high)" in printed
    # the terminal shows the figures the kind declares (FIGURES), the rest of the evidence is in the documents
    assert "stalled_share 0.3" in printed and "steps_seen" not in printed
    assert f"{NAME}: Unstall the throwaway." in printed
    planned, notes = plan_experiments(report)
    assert [(e.kind, e.name, e.description) for e in planned] == [
        (NAME, "three_workers", "DataLoader(num_workers=3, persistent_workers=True)")]
    assert Note("unmeasured", f"verified fix for {NAME}: unstalling it has no experiment of its own") in notes


def test_without_its_registry_line_the_kind_is_unknown() -> None:
    assert NAME not in KINDS
    with pytest.raises(ValueError, match=f"unknown finding kind '{NAME}'"):
        Finding(NAME, "high", 0.3, {}, "fix", "snippet", None, "high")
    report = diagnose(on_cpu(steps(20), host()))
    assert NAME not in by_kind(report) and report.verdict.primary == "compute_bound" and NAME not in report.timeline
    assert NAME not in terminal(report)


def test_a_kind_that_leaves_out_its_contract_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="does not declare RECOMMEND_SOURCE, detect"):
        type("Unsourced", (Kind,), {"NAME": "unsourced", "MEANING": "m", "PART": "step", "RECOMMEND_AT": 0.05,
                                    "FIGURES": ()})
    declared = {"NAME": "nowhere", "MEANING": "m", "RECOMMEND_AT": 0.05, "RECOMMEND_SOURCE": "s", "FIGURES": (),
                "detect": ThrowawayStall.detect}
    with pytest.raises(TypeError, match="claims time but names no PART and no claims"):
        type("Nowhere", (Kind,), declared)
    with pytest.raises(TypeError, match="claims no time, so it has no level"):
        type("Timeless", (Kind,), {**declared, "CLAIMS_TIME": False})


def test_a_figure_the_detection_does_not_fill_is_our_error(registered, monkeypatch) -> None:
    monkeypatch.setattr(ThrowawayStall, "FIGURES", ("stalled_share", "never_written"))
    with pytest.raises(AssertionError, match=r"lacks its FIGURES \['never_written'\]"):
        diagnose(on_cpu(steps(20), host()))


def test_the_typed_evidence_reads_keys_the_detections_write() -> None:
    waits = by_kind(diagnose(on_cpu(steps(20, wall=0.1, wait=0.05), host())))["input_bound"]
    copies = by_kind(diagnose(on_gpu(steps(20, compute=0.03, copy=0.05, copy_bytes=10**6), host())))["host_to_device"]
    float32 = by_kind(diagnose(on_gpu(steps(20, compute=0.09), host(), autocast_seen=False)))["precision"]
    float64 = by_kind(diagnose(on_cpu(steps(20), host(), float64_seen=True)))["precision"]
    seen = on_cpu(steps(20, wall=0.1, wait=0.05), host(), workers=2, cpu_count=16)
    memory = by_kind(diagnose(dataclasses.replace(seen, worker_memory=reading(40.0, 50))))["worker_memory"]
    for view, findings in ((InputBoundEvidence, [waits]), (HostToDeviceEvidence, [copies]),
                           (PrecisionEvidence, [float32, float64]), (WorkerMemoryEvidence, [memory])):
        written = set().union(*(finding.evidence for finding in findings))
        assert {field.name for field in dataclasses.fields(view)} <= written, view.__name__
    assert PrecisionEvidence.of(float64.evidence).autocast_seen is None  # the float64 finding has none
    assert PrecisionEvidence.of(float32.evidence).autocast_seen is False


def test_the_terminal_shows_the_figures_each_kind_declares_the_rest_goes_to_the_documents():
    from types import SimpleNamespace

    from gpufeed.cli.doctor_show import carrying_figures
    from gpufeed.doctor.findings import KINDS

    evidence = {"getitem_ms": 21.2, "loader_workers": 0, "mean_wait_ms": 22.4, "data_wait_share": 0.76,
                "collate_ms": 0.8}
    shown = carrying_figures(SimpleNamespace(kind="input_bound", evidence=evidence))
    assert list(shown) == list(KINDS["input_bound"].FIGURES) == ["data_wait_share", "mean_wait_ms", "loader_workers"]
    unknown = carrying_figures(SimpleNamespace(kind="from_a_newer_gpufeed", evidence={"a": 1}))
    assert unknown == {"a": 1}  # a kind this version does not know: all its evidence
