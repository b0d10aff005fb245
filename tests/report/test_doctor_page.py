"""The page of `gpufeed doctor --html`: built from a real run's document and from hand-made variants."""

from __future__ import annotations

import copy
import html
import json
import shutil
from pathlib import Path

import pytest
from pagecheck import parse_page, visible  # the page checks shared by the report tests

from gpufeed.report.doctor_page import step_parts
from gpufeed.report.document import render

FIXTURES = Path(__file__).parent / "fixtures"


def load() -> dict:
    return json.loads((FIXTURES / "doctor.json").read_text(encoding="utf-8"))


def gpu_run() -> dict:
    """The fixture as if on a GPU: copies, device compute, sync stalls, NVML readings and the optional host keys."""
    document = load()
    document["verdict"].update(device="cuda:0", device_busy=0.41)
    for step in document["timeline"]["steps"]:
        step.update(copy_s=0.004, copy_bytes=12_288, compute_s=0.009, sync_count=1, sync_s=0.002,
                    kernel_launches=31)
        if step["index"] % 2 == 0:  # a short wait leaves other host work; odd steps keep their 21 ms wait
            step["data_wait_s"] = 0.004
    for index, sample in enumerate(document["timeline"]["samples"]):
        sample.update(gpu_utilization_percent=40.0 + index, gpu_memory_used_bytes=3 * 2**30,
                      ram_used_bytes=5 * 2**30, ram_total_bytes=16 * 2**30, sm_activity_percent=30.0,
                      disk_read_bytes_per_s=None)
    document["findings"][1]["gain"] = {"measured": 1.37, "change": "DataLoader batch_size x2", "range": [1.31, 1.40],
                                       "pairs": 3, "bound": None, "how": "doubled batch: median of 3 pairs 1.37x"}
    return document


def crashed_run() -> dict:
    """What doctor saves when the script raised before its first step."""
    document = load()
    document.update(verdict={"primary": None, "device_busy": None, "data_wait": None, "steps": 0, "device": "cpu"},
                    findings=[], loader_samples_per_s=None, model_samples_per_s=None,
                    script_error="ZeroDivisionError: division by zero (train.py, line 12)",
                    timeline={"steps": [], "samples": []},
                    unmeasured=["watch incomplete: the script raised before its first step"])
    return document


def test_the_fixture_makes_a_balanced_page_with_four_charts_and_its_numbers():
    document = load()
    page = render(document)
    parsed = parse_page(page)
    assert parsed.charts == 4  # the gap, the step timeline, the host readings, the verified gains
    text = visible(parsed)
    assert "gpufeed doctor: input_bound" in text
    # a report saved before verdict.share: the headline reads its finding's share
    assert "input_bound: 95% of the step (high). input_bound means: the step waits for the next batch" in text
    assert "95.3%" in text  # the data wait share 0.9528 as the verdict shows it
    # num_workers=0: the loader runs in series with the model, so the rates add, not compare:
    # 1 / (1 / 190.92 + 1 / 3851.86) = 181.9 samples/s
    assert ("The loader has no workers, so it runs in series with the model: it makes 191 samples/s while it "
            "runs and the model consumes 3,852 samples/s when fed instantly; in series they give 182 samples/s"
            in text)
    assert "keeps up" not in text
    for finding in document["findings"]:
        assert f"{finding['kind']} ({finding['severity']}, {finding['confidence']} confidence)" in text
        assert html.escape(finding["snippet"]) in page
    assert "2.06× (2.01–2.08)" in text and "106×" in text  # the fix's gain with its range; the bound, 106.41
    assert ("Tried: DataLoader(num_workers=2, persistent_workers=True): 2.06x (2.01–2.08 over 3 pairs); if input "
            "were free (the bound, not a fix): 106.41x.") in text  # the fix first
    assert "Zero in every step, so not drawn: host-to-device, stalls." in text
    for line in document["unmeasured"]:
        assert html.escape(line) in page


def test_a_gpu_run_draws_every_part_of_the_step_and_the_gpu_readings():
    page = render(gpu_run())
    parsed = parse_page(page)
    assert parsed.charts == 4
    text = visible(parsed)
    assert "41.0%" in text and "1.37×" in text and "memory in GiB" in text
    for label in ("host-to-device copies (host time)", "compute (device time, CUDA events)",
                  "stalls (host waiting on the device)", "GPU utilization (NVML)", "SM activity", "host RAM used",
                  "host RAM installed"):
        assert label in page
    assert "disk reads" not in page  # present as a key, but never measured
    assert "not separated on the CPU" not in page and "so not drawn" not in text
    assert "step wall time" in page and "black tick" in text  # odd steps: 21 + 4 + 9 + 2 ms > their 22 ms wall time


def test_a_run_that_crashed_before_any_step_still_makes_a_page_without_charts():
    document = crashed_run()
    parsed = parse_page(render(document))
    assert parsed.charts == 0
    text = visible(parsed)
    assert "gpufeed doctor: no training step was watched" in text
    assert "ZeroDivisionError: division by zero (train.py, line 12)" in text
    assert "watch incomplete: the script raised before its first step" in text
    assert "No finding." in text


def test_a_crashed_run_with_host_readings_draws_only_them():
    document = crashed_run()
    document["timeline"]["samples"] = load()["timeline"]["samples"]
    assert parse_page(render(document)).charts == 1


def _step(wall: float, wait: float, copy: float, compute: float | None, sync: float) -> dict:
    return {"index": 0, "start_s": 0.0, "wall_s": wall, "data_wait_s": wait, "copy_s": copy, "copy_bytes": 0,
            "copy_pageable_bytes": 0, "compute_s": compute, "sync_count": 1, "sync_s": sync, "batch_size": 8,
            "kernel_launches": None}


def test_step_parts_other_host_is_the_rest_of_the_wall_time_and_never_negative():
    parts = step_parts([_step(0.030, 0.002, 0.004, 0.020, 0.001), _step(0.030, 0.002, 0.004, 0.020, 0.015),
                        _step(0.030, 0.010, 0.0, None, 0.0)])
    assert list(parts) == ["data wait", "host-to-device", "compute", "stalls", "other host"]
    # by hand: 30 - 2 - 4 - 20 - 1 = 3 ms; 30 - 2 - 4 - 20 - 15 < 0, so 0; 30 - 10 (compute not measured) = 20 ms
    assert parts["other host"] == pytest.approx([0.003, 0.0, 0.020])
    assert parts["compute"] == [0.020, 0.020, 0.0]


def test_step_parts_on_the_cpu_have_no_compute_part():
    parts = step_parts([_step(0.050, 0.010, 0.005, None, 0.002)])
    assert "compute" not in parts
    assert parts["other host"] == pytest.approx([0.033])  # 50 - 10 - 5 - 2 ms


def test_report_of_the_fixture_through_the_command_line(tmp_path):
    from gpufeed.cli.main import main

    saved = tmp_path / "doctor.json"
    shutil.copy(FIXTURES / "doctor.json", saved)
    assert main(["report", str(saved)]) == 0  # the page goes beside the document
    assert (tmp_path / "doctor.html").read_text(encoding="utf-8") == render(load())


def test_the_page_does_not_change_the_document():
    document = gpu_run()
    before = copy.deepcopy(document)
    render(document)
    assert document == before


def test_profiled_steps_are_a_table_of_counts_and_shares():
    document = load()
    document["timeline"]["profile"] = [
        {"index": 0, "wall_s": 0.010, "operators": 1304, "outside_operators_s": 0.005, "loader_s": 0.001,
         "kernels": None, "short_kernels": None, "kernel_s": None, "kernel_busy_s": None},
        {"index": 1, "wall_s": 0.020, "operators": 1304, "outside_operators_s": 0.003, "loader_s": 0.0,
         "kernels": 410, "short_kernels": 400, "kernel_s": 0.004, "kernel_busy_s": 0.0025}]
    parsed = parse_page(render(document))
    assert parsed.charts == 4  # a table, not a chart
    text = visible(parsed)
    assert "2 steps after the watched ones ran under torch.profiler" in text
    assert "1,304" in text and "410" in text
    # hand: 0.005 / 0.010 = 50%, 0.001 / 0.010 = 10%; 0.003 / 0.020 = 15%, 0.0025 / 0.020 = 12.5% -> 12%
    for share in ("50%", "10%", "15%", "12%"):
        assert share in text
    del document["timeline"]["profile"]
    assert "Profiled steps" not in visible(parse_page(render(document)))


def test_notes_about_the_run_and_what_was_not_measured_are_apart():
    document = load()
    run_note = "periodic stalls: a beat longer than 15 steps cannot show in 30 watched steps"
    document["unmeasured"] = [run_note] + document["unmeasured"]
    document["notes"] = [run_note]
    text = visible(parse_page(render(document)))
    about, missing = text.index("About the run"), text.index("Not measured")
    assert about < text.index(run_note) < missing  # under its own heading, not under "Not measured"
    assert text.count(run_note) == 1
    assert missing < text.index("device memory: the device is the CPU")
    del document["notes"]  # a document written before notes were typed: every line is under "Not measured"
    text = visible(parse_page(render(document)))
    assert "About the run" not in text and text.index("Not measured") < text.index(run_note)


def test_several_ranks_get_their_table_and_one_timeline_row_each():
    document = load()
    document["verdict"]["world_size"] = 2
    document["ranks"] = [
        {"rank": 0, "steps": 2, "step_ms": 38.0, "data_wait_ms": 0.5, "compute_ms": 1.5, "collective_ms": 36.0,
         "exposed_ms": 36.0, "bytes_per_step": 2 * 2**20, "problem": None},
        {"rank": 1, "steps": 2, "step_ms": 38.0, "data_wait_ms": 33.5, "compute_ms": 2.0, "collective_ms": 2.5,
         "exposed_ms": 2.5, "bytes_per_step": 2 * 2**20, "problem": "stopped: rank 0 failed"}]
    step = {"index": 0, "start_s": 5.0, "wall_s": 0.038, "data_wait_s": 0.0335, "collective_s": 0.0025,
            "exposed_s": 0.0025, "bytes": 2 * 2**20, "buckets": 1}
    document["timeline"]["ranks"] = [{"rank": rank, "steps": [step, dict(step, index=1, start_s=5.038)]}
                                     for rank in (1, 0)]
    parsed = parse_page(render(document))
    assert parsed.charts == 5  # the fixture's four and the ranks' timeline
    text = visible(parsed)
    assert "Ranks (2)" in text and "stopped: rank 0 failed" in text and "One row per rank" in text


def _sentences(text: str) -> list[str]:
    import re

    return [sentence.strip() for sentence in re.split(r"(?<=[.!?])\s+", text) if len(sentence.strip()) > 25]


@pytest.mark.parametrize("variant", ["fixture", "gpu", "compute_bound"])
def test_no_sentence_is_said_twice_on_the_page(variant):
    """Issue 34: the page repeated the verdict's meaning, its fix ("What to do first" and again in the finding's
    section) and "Not verified by an experiment." for each untried finding."""
    document = gpu_run() if variant == "gpu" else load()
    if variant == "compute_bound":
        healthy = {"kind": "compute_bound", "severity": "info", "share": 0.9, "confidence": "high",
                   "evidence": {"compute_share": 0.9, "device_busy": None, "claimed_by_others": 0.1},
                   "fix": None, "snippet": None, "gain": None}
        document["findings"] = [healthy]
        document["verdict"].update(primary="compute_bound", share=0.9)
    text = visible(parse_page(render(document)))
    import collections

    repeated = [s for s, count in collections.Counter(_sentences(text)).items() if count > 1]
    assert repeated == []
    assert "Not verified by an experiment" not in text
