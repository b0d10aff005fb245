"""The train page's utilization chart draws NVML GPM SM activity when the log intervals have it, and only then."""

from __future__ import annotations

import json
from pathlib import Path

from gpufeed.report.document import render

FIXTURES = Path(__file__).parent / "fixtures"
LEGEND = "SM activity (NVML GPM)"  # the line's label: one legend entry in the chart's SVG
CAPTION = "SM activity is the share of the GPU&#x27;s SMs that were busy"  # the page escapes the apostrophe


def gpu_document(sm_activity: list[float | None] | None) -> dict:
    """The fixture run as if on a GPU, each log interval with NVML utilization and, when given, SM activity."""
    document = json.loads((FIXTURES / "train.json").read_text(encoding="utf-8"))
    document.update(device="cuda:0", device_busy_fraction=0.83, gpu_utilization_percent=91.5, unmeasured=[])
    for index, log in enumerate(document["timeline"]):
        log["device_busy_fraction"], log["gpu_utilization_percent"] = 0.8, 90.0 + index % 5
        if sm_activity is not None:
            log["sm_activity_percent"] = sm_activity[index % len(sm_activity)]
    return document


def test_sm_activity_is_drawn_and_explained_when_the_intervals_have_it():
    page = render(gpu_document([41.0, 44.5, None]))  # an interval without a GPM window leaves a gap
    assert page.count(LEGEND) == 1 and page.count(CAPTION) == 1
    assert page.count("GPU utilization (NVML)") == 1  # NVML's figure stays beside it


def test_no_sm_activity_line_without_it():
    for document in (gpu_document(None), gpu_document([None])):  # key absent (older runs), or never measured
        page = render(document)
        assert LEGEND not in page and "SM activity" not in page
        assert page.count("GPU utilization (NVML)") == 1
