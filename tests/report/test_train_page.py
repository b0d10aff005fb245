"""The page of `gpufeed train --html`: built from a real run's document and from hand-made variants."""

from __future__ import annotations

import copy
import html
import json
import shutil
from pathlib import Path

import pytest
from pagecheck import parse_page, visible  # noqa: F401 (visible: used by tests here)

from gpufeed.report.document import render
from gpufeed.report.train_page import intervals

FIXTURES = Path(__file__).parent / "fixtures"
def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def gpu_run() -> dict:
    """The fixture as if on a GPU: device busy shares, NVML utilization, and overlapping wait and compute."""
    document = load("train.json")
    document.update(device="cuda:0", device_busy_fraction=0.83, gpu_utilization_percent=91.5, unmeasured=[])
    for index, log in enumerate(document["timeline"]):
        log["device_busy_fraction"] = 0.99 if index == 3 else 0.8
        log["gpu_utilization_percent"] = 90.0 + index % 5
    return document


def test_the_fixture_makes_a_balanced_page_with_three_charts_and_its_numbers():
    document = load("train.json")
    page = render(document)
    parsed = parse_page(page)
    assert parsed.charts == 3  # step timeline, utilization, throughput and loss
    text = visible(parsed)
    assert "Validation accuracy 48.1% after 117 steps (3 epochs) at 1,877 samples/s." in text
    assert f"Verdict: {document['verdict']}." in text
    assert "568 MiB" in text and "peak resident memory of the process" in text  # 595902464 bytes / 2**20
    assert "cnn, 292,954 parameters" in text
    assert "each bar is one log interval of 5 steps" in text.lower()
    assert "not separated on the CPU" in page  # the legend says that compute is inside the rest
    for line in document["unmeasured"]:
        assert html.escape(line) in page


def test_a_gpu_run_shows_compute_the_busy_share_and_the_gpu_line():
    page = render(gpu_run())
    parsed = parse_page(page)
    assert parsed.charts == 3
    text = visible(parsed)
    assert "83.0%" in text and "91.5 %" in text and "peak device memory allocated" in text
    assert "compute (device busy, CUDA events)" in page and "GPU utilization (NVML)" in page
    assert "wall time of the interval, per step" in page  # interval 3 waits 1.8% and computes 99%: they overlap
    assert "not separated on the CPU" not in page


def test_a_run_with_no_interval_has_no_chart():
    document = load("train.json")
    document.update(timeline=[], steps_this_run=0)
    parsed = parse_page(render(document))
    assert parsed.charts == 0
    assert "No log interval was recorded" in visible(parsed)


def test_a_run_without_host_readings_has_no_utilization_chart():
    document = load("train.json")
    for log in document["timeline"]:
        log["cpu_percent"] = None
    parsed = parse_page(render(document))
    assert parsed.charts == 2
    assert "Neither CPU nor GPU utilization was sampled" in visible(parsed)


def test_a_long_run_draws_groups_of_intervals():
    document = load("train.json")
    logs = [{**document["timeline"][0], "step": 5 * (index + 1), "seconds": 0.8 * (index + 1)} for index in range(450)]
    document.update(timeline=logs, steps=2250, steps_this_run=2250)
    parsed = parse_page(render(document))
    assert parsed.charts == 3
    assert "Each bar is 3 consecutive log intervals of 5 steps" in visible(parsed)  # 450 intervals, 200 bars at most


def _timeline(busy: list) -> dict:
    logs = [(105, 1.0, 0.1), (110, 1.5, 0.2), (112, 2.5, 0.5)]  # step, running seconds, data-wait share
    return {"steps": 112, "steps_this_run": 12, "timeline": [
        {"step": step, "seconds": seconds, "data_wait_fraction": wait, "device_busy_fraction": share}
        for (step, seconds, wait), share in zip(logs, busy, strict=True)]}


def test_interval_parts_are_the_shares_of_each_intervals_own_seconds():
    bars = intervals(_timeline([0.6, 0.9, 0.3]))
    # by hand: intervals of 1.0, 0.5 and 1.0 s starting at steps 100, 105, 110 (resumed at 112 - 12)
    assert [(bar["first_step"], bar["steps"]) for bar in bars] == [(100, 5), (105, 5), (110, 2)]
    assert [bar["seconds"] for bar in bars] == pytest.approx([1.0, 0.5, 1.0])
    assert [bar["data wait"] for bar in bars] == pytest.approx([0.1, 0.1, 0.5])
    assert [bar["compute"] for bar in bars] == pytest.approx([0.6, 0.45, 0.3])
    # the rest: 1.0-0.1-0.6 = 0.3; 0.5-0.1-0.45 < 0, so none; 1.0-0.5-0.3 = 0.2
    assert [bar["other host"] for bar in bars] == pytest.approx([0.3, 0.0, 0.2])


def test_interval_parts_without_a_busy_share_and_merged_in_groups():
    bars = intervals(_timeline([None, None, None]), limit=2)
    assert len(bars) == 2 and [bar["intervals"] for bar in bars] == [2, 1]
    assert bars[0]["first_step"] == 100 and bars[0]["steps"] == 10 and bars[0]["compute"] is None
    assert bars[0]["seconds"] == pytest.approx(1.5)
    assert bars[0]["data wait"] == pytest.approx(0.2)
    assert bars[0]["other host"] == pytest.approx(1.3)  # (1.0 - 0.1) + (0.5 - 0.1)
    assert bars[1]["other host"] == pytest.approx(0.5)


def test_report_of_the_fixture_through_the_command_line(tmp_path):
    from gpufeed.cli.main import main

    saved = tmp_path / "train.json"
    shutil.copy(FIXTURES / "train.json", saved)
    out = tmp_path / "page.html"
    assert main(["report", str(saved), "--html", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render(load("train.json"))


@pytest.mark.slow
def test_train_writes_the_page_that_report_rebuilds_from_its_json(tmp_path, monkeypatch):
    from gpufeed.cli.main import main

    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    page, saved, rebuilt = tmp_path / "run.html", tmp_path / "run.json", tmp_path / "rebuilt.html"
    assert main(["train", "--count", "600", "--epochs", "1", "--log-every", "1", "--batch-size", "64",
                 "--model", "mlp", "--hidden", "64", "--precision", "fp32",
                 "--html", str(page), "--json", str(saved)]) == 0
    document = json.loads(saved.read_text(encoding="utf-8"))
    assert len(document["timeline"]) == document["steps"] == 9  # 540 training images: 8 batches of 64 and one of 28
    sampled = any(log["cpu_percent"] is not None for log in document["timeline"])  # the sampler polls every 0.1 s
    assert parse_page(page.read_text(encoding="utf-8")).charts == 2 + sampled
    assert main(["report", str(saved), "--html", str(rebuilt)]) == 0
    assert rebuilt.read_bytes() == page.read_bytes()


def test_the_page_does_not_change_the_document():
    document = gpu_run()
    before = copy.deepcopy(document)
    render(document)
    assert document == before
