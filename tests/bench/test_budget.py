"""The quick bench's time budget, with the clock and the timer faked (no timing is asserted): a first call over
the allowance stops the measurement, the repeats fit the allowance, a spent budget skips what is left and says so."""

from __future__ import annotations

import time

import pytest
import torch

from gpufeed.bench import budget as budget_module
from gpufeed.bench.budget import NO_BUDGET, QUICK_MEASUREMENT_S, Budget, OverBudget, budgeted_timing
from gpufeed.bench.kernels import conv_benchmark, matmul_sweep
from gpufeed.bench.steps import train_step_benchmark
from gpufeed.measure.timing import Timing

SPENT = Budget(QUICK_MEASUREMENT_S, time.monotonic() - 1.0, "the quick bench's 15 s for training steps on cpu")


@pytest.fixture
def fake_timer(monkeypatch):
    """time_call replaced: the first (single) call takes `first_s`; the calls it was asked for are recorded."""
    calls = []

    def fake_time_call(fn, device, warmup=3, repeats=10, min_seconds=0.0, max_runs=1000):
        calls.append({"warmup": warmup, "repeats": repeats, "min_seconds": min_seconds})
        return Timing(fake_time_call.first_s, fake_time_call.first_s, fake_time_call.first_s, repeats, warmup, "fake")

    fake_time_call.first_s = 0.5
    monkeypatch.setattr(budget_module, "time_call", fake_time_call)
    fake_time_call.calls = calls
    return fake_time_call


def test_a_first_call_over_the_allowance_stops_the_measurement(fake_timer):
    fake_timer.first_s = 9.0
    with pytest.raises(OverBudget, match=r"first call took 9.00 s, over the 8.0 s"):
        budgeted_timing(lambda: None, "cpu", Budget(8.0, None), warmup=3, repeats=10)
    assert len(fake_timer.calls) == 1


def test_repeats_fit_the_allowance(fake_timer):
    fake_timer.first_s = 0.5  # 15 more calls fit in 8 s: 2 warm-ups left, then 10 repeats
    budgeted_timing(lambda: None, "cpu", Budget(8.0, None), warmup=3, repeats=10, min_seconds=0.05)
    assert fake_timer.calls[1] == {"warmup": 2, "repeats": 10, "min_seconds": 0.05}
    fake_timer.first_s = 3.0  # 1 more fits: no more warm-up, and the 2 repeats a spread needs
    budgeted_timing(lambda: None, "cpu", Budget(8.0, None), warmup=3, repeats=10)
    assert fake_timer.calls[3]["warmup"] == 0 and fake_timer.calls[3]["repeats"] == 2


def test_no_budget_is_the_plain_timer(fake_timer):
    budgeted_timing(lambda: None, "cpu", NO_BUDGET, warmup=3, repeats=10)
    assert fake_timer.calls == [{"warmup": 3, "repeats": 10, "min_seconds": 0.0}]


def test_a_spent_budget_skips_the_rest_and_names_it():
    assert SPENT.spent() and SPENT.allowance_s() == 0.0 and not Budget.quick(15.0, "training steps on cpu").spent()
    assert SPENT.spent_reason().startswith("skipped: the quick bench's 15 s for training steps on cpu were spent")
    results, unmeasured = matmul_sweep("cpu", ("fp32",), (64, 128), budget=SPENT)
    assert results == [] and unmeasured == [f"matmul fp32 on cpu at 64, 128: {SPENT.spent_reason()}"]
    results, unmeasured = conv_benchmark("cpu", ("fp32",), batch=2, budget=SPENT)
    assert results == [] and unmeasured == [f"conv2d fp32 on cpu: {SPENT.spent_reason()}"]
    steps, unmeasured = train_step_benchmark(models=("mlp",), devices=["cpu"], precisions=("fp32",),
                                             batch_sizes=(8,), budget=SPENT)
    assert steps == [] and unmeasured == [f"train steps, mlp on cpu fp32 batch 8: {SPENT.spent_reason()}"]


def test_an_over_budget_size_skips_the_larger_ones(monkeypatch):
    def over(*args, **kwargs):
        raise OverBudget(12.0, 8.0)

    monkeypatch.setattr("gpufeed.bench.kernels.budgeted_timing", over)
    results, unmeasured = matmul_sweep(torch.device("cpu"), ("fp32",), (64, 128), budget=Budget(8.0, None))
    assert results == [] and unmeasured == ["matmul fp32 on cpu at 64, 128: skipped: its first call took 12.00 s, "
                                            "over the 8.0 s a measurement of a quick bench may take (run without "
                                            "--quick to measure it)"]
