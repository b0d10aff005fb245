"""The host-device link: advice on synthetic results, the CPU's answer, NVML's link readings, and a real measurement
on a CUDA GPU (skipped without one). The PCIe figures themselves are tests/hardware/test_pcie.py's."""

import statistics
import time

import pytest
import torch

from gpufeed.bench import link
from gpufeed.bench.link import LinkReading, link_advice, measure_link
from gpufeed.bench.results import LinkResult
from gpufeed.hardware.na import NA

MIB = 1 << 20


def _results(theoretical, pinned_h2d, pageable_h2d, pinned_d2h=None, pageable_d2h=None):
    pinned_d2h = pinned_h2d if pinned_d2h is None else pinned_d2h
    pageable_d2h = pageable_h2d if pageable_d2h is None else pageable_d2h
    figures = [("host_to_device", False, pageable_h2d), ("host_to_device", True, pinned_h2d),
               ("device_to_host", False, pageable_d2h), ("device_to_host", True, pinned_d2h)]
    return [LinkResult(direction=d, pinned=p, bytes=64 * MIB, gb_per_s=g, runs=10, theoretical_gb_per_s=theoretical)
            for d, p, g in figures]


def test_healthy_link_gets_no_advice():
    assert link_advice(_results(31.5, pinned_h2d=25.0, pageable_h2d=20.0)) == []
    assert link_advice([]) == []


def test_thunderbolt_link_is_narrow_and_says_what_to_do():
    advice = link_advice(_results(3.94, pinned_h2d=2.8, pageable_h2d=2.5))
    text = " ".join(advice)
    assert "narrow" in text and "3.94 GB/s theoretical" in text and "2.80 GB/s measured" in text
    assert "uint8" in text and "4x" in text
    assert "Keep the dataset on the device" in text
    assert not any("pinned memory (pin_memory=True)" in line for line in advice)  # 2.8 vs 2.5 is not "much"


def test_narrow_by_theoretical_alone_at_the_threshold():
    assert "narrow" in link_advice(_results(8.0, pinned_h2d=7.0, pageable_h2d=7.0))[0]
    assert link_advice(_results(8.1, pinned_h2d=7.0, pageable_h2d=7.0)) == []


def test_narrow_by_measurement_when_nvml_gave_nothing():
    advice = link_advice(_results(None, pinned_h2d=5.0, pageable_h2d=5.0))
    assert "narrow" in advice[0] and "theoretical" not in advice[0]
    assert link_advice(_results(None, pinned_h2d=6.0, pageable_h2d=6.0)) == []


def test_pageable_much_slower_than_pinned_is_flagged_per_direction():
    advice = link_advice(_results(31.5, pinned_h2d=24.0, pageable_h2d=8.0, pinned_d2h=25.0, pageable_d2h=24.0))
    assert len(advice) == 1
    assert "host to device" in advice[0] and "8.00 GB/s" in advice[0] and "24.00 GB/s" in advice[0]
    assert "pin_memory=True" in advice[0]


def test_cpu_device_has_no_link():
    assert measure_link("cpu") == ([], ["host-device link: the device is the CPU; there is no link to measure"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer on a machine without CUDA")
def test_cuda_asked_for_without_cuda_is_unmeasured():
    results, unmeasured = measure_link("cuda")
    assert results == [] and len(unmeasured) == 1 and "sees no CUDA device" in unmeasured[0]


def test_link_reading_keeps_the_fastest_generation(monkeypatch):
    generations = iter([1, 4, NA("Not Supported")])  # an idle link reads gen 1 before it speeds up
    monkeypatch.setattr(link.nvml, "pcie_generation", lambda index: next(generations))
    monkeypatch.setattr(link.nvml, "pcie_width", lambda index: 16)
    reading = LinkReading(0)
    for _ in range(3):
        reading.read()
    assert reading.theoretical() == (pytest.approx(31.5077, abs=5e-4), None)


def test_link_reading_without_nvml_names_why():
    theoretical, why = LinkReading(NA("NVML not available: no driver")).theoretical()
    assert theoretical is None and "NVML not available: no driver" in why
    reading = LinkReading(0)
    theoretical, why = reading.theoretical()
    assert theoretical is None and "no copy was timed" in why


@pytest.mark.timing
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_measure_link_on_cuda():
    started = time.perf_counter()
    results, unmeasured = measure_link("cuda", sizes_bytes=(16 * MIB,), repeats=3)
    around_s = time.perf_counter() - started
    # no lower bound on the rate (an upper bound on the time): what it guarded (seconds in the wrong unit, a copy
    # counted twice) is that the timed copies fit in the time around them; < 1000 GB/s is a lower bound on it
    assert sum(sum(result.seconds) for result in results) <= around_s
    kinds = {(r.direction, r.pinned) for r in results}
    assert kinds == {("host_to_device", False), ("host_to_device", True), ("device_to_host", False),
                     ("device_to_host", True)}
    for result in results:
        assert result.bytes == 16 * MIB and result.runs == 3 and 0 < result.gb_per_s < 1000
        assert len(result.seconds) == 3 and result.gb_per_s == result.bytes / statistics.median(result.seconds) / 1e9
        if result.theoretical_gb_per_s is None:
            assert any("theoretical" in line for line in unmeasured)
        else:
            assert result.theoretical_gb_per_s > 0
    assert isinstance(link_advice(results), list)
