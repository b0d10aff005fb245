"""The busy-machine verdict from fake readings (other processes' CPU seconds, steal, repeat spreads), against hand
arithmetic; the real reading leaves this process out; the verdict leads the summary."""

from __future__ import annotations

import os

import pytest

from gpufeed.bench.busy import (
    OTHER_PROCESSES_LIMIT,
    SPREAD_LIMIT,
    STEAL_LIMIT,
    CpuReading,
    busy_sentence,
    judge,
    others_cpu_seconds,
    read_cpu,
    spread_text,
)
from gpufeed.bench.results import BenchResult
from gpufeed.bench.summary import summarise

T0 = 1_000_000.0  # wall clock of the first reading


def reading(at: float, others: dict, total: float | None = 0.0, steal: float | None = 0.0) -> CpuReading:
    return CpuReading(wall_s=T0 + at, total_cpu_s=total, steal_s=steal, others=others)


def test_a_quiet_window_is_not_busy():
    start = reading(0, {10: (T0 - 500, 3.0)}, total=0.0, steal=0.0)
    end = reading(10, {10: (T0 - 500, 3.04)}, total=20.0, steal=0.1)  # 0.04 s of 20 core-seconds
    verdict = judge(start, end, usable_cores=2, timings=[("matmul fp32 512", 0.010, 0.012)])
    assert not verdict.busy and verdict.reasons == []
    assert verdict.other_processes_cpu_share == pytest.approx(0.04 / 20)
    assert verdict.steal_share == pytest.approx(0.1 / 20) and verdict.worst_spread == pytest.approx(1.2)
    assert busy_sentence(verdict).startswith("machine quiet during the bench (10 s): other processes 0% of 2 cores")


def test_other_processes_past_the_limit_are_named():
    start = reading(0, {10: (T0 - 500, 5.0), 11: (T0 - 400, 1.0), 12: (T0 - 300, 50.0)})
    end = reading(10, {
        10: (T0 - 500, 12.0),  # 7 s more
        11: (T0 + 2.0, 3.0),  # pid reused by a process started in the window: all 3 s count
        13: (T0 + 5.0, 2.0),  # started in the window: 2 s
    })  # pid 12 ended: uncountable here (its parent's children times would carry it)
    assert others_cpu_seconds(start, end) == pytest.approx(7.0 + 3.0 + 2.0)
    verdict = judge(start, end, usable_cores=2, timings=[])
    assert verdict.other_processes_cpu_share == pytest.approx(12.0 / (10 * 2))
    assert verdict.busy and verdict.reasons == [
        f"other processes used 60% of the 2 usable cores during the bench (limit {OTHER_PROCESSES_LIMIT:.0%})"]
    assert busy_sentence(verdict).startswith("figures unreliable: other processes used 60%")


def test_steal_past_the_limit_is_named():
    verdict = judge(reading(0, {}, total=100.0, steal=2.0), reading(10, {}, total=120.0, steal=4.0), 2, [])
    assert verdict.steal_share == pytest.approx(2.0 / 20.0)
    assert verdict.busy and f"(steal; limit {STEAL_LIMIT:.0%})" in verdict.reasons[0] and "10%" in verdict.reasons[0]
    unknown = judge(reading(0, {}, total=None, steal=None), reading(10, {}, total=None, steal=None), 2, [])
    assert unknown.steal_share is None and not unknown.busy


def test_a_spread_past_the_limit_is_named_and_sub_millisecond_jitter_is_not():
    timings = [("matmul bf16 128 x 128 x 128 on cpu", 0.00004, 0.0007),  # 17x, but 0.66 ms: an interrupt
               ("the cnn fp32 training step at batch 256 on cpu", 0.30, 1.50),  # 5x and 1.2 s
               ("matmul fp32 1024 x 1024 x 1024 on cpu", 0.030, 0.033)]
    verdict = judge(reading(0, {}), reading(10, {}), 2, timings)
    # the worst spread is the table's figure, whatever its size: 0.0007 / 0.00004 = 17.5x
    assert verdict.worst_spread == pytest.approx(17.5)
    assert verdict.worst_spread_measurement == "matmul bf16 128 x 128 x 128 on cpu"
    # the limit looks only at repeats over 1 ms apart: 1.50 / 0.30 = 5x
    assert verdict.worst_spread_counted == pytest.approx(5.0)
    assert verdict.worst_spread_counted_measurement == "the cnn fp32 training step at batch 256 on cpu"
    assert verdict.busy and verdict.reasons == [
        f"the slowest repeat of the cnn fp32 training step at batch 256 on cpu took 5.0x its fastest (limit "
        f"{SPREAD_LIMIT:g}x for repeats over 1 ms apart)"]
    assert spread_text(verdict) == ("worst spread of repeats 17.5x (matmul bf16 128 x 128 x 128 on cpu); of the "
                                    "summary's measurements with repeats over 1 ms apart, the limit's concern, 5.0x, "
                                    "the cnn fp32 training step at batch 256 on cpu")
    jitter = judge(reading(0, {}), reading(10, {}), 2, timings[:1])
    assert jitter.worst_spread == pytest.approx(17.5) and jitter.worst_spread_counted is None and not jitter.busy


def test_the_real_reading_leaves_this_process_out():
    now = read_cpu()
    assert os.getpid() not in now.others
    assert all(seconds >= 0 for _, seconds in now.others.values())
    assert now.total_cpu_s is None or now.total_cpu_s > 0


def test_a_busy_verdict_leads_the_summary():
    verdict = judge(reading(0, {}, total=100.0, steal=0.0), reading(10, {}, total=120.0, steal=5.0), 2, [])
    sentences = summarise(BenchResult(machine=None, settings={"devices": ["cpu"]}, machine_busy=verdict))
    assert sentences[0] == "figures unreliable: the hypervisor gave 25% of CPU time to other guests (steal; limit 5%)."


def test_a_kernel_the_summary_does_not_use_is_reported_not_judged():
    """Issue 34's case: a 0.025 ms bf16 128^3 product whose slowest repeat was 49.7x its fastest (1.24 ms apart)
    opened the summary with "figures unreliable" while the 1024^3 products it rests on spread 1.0-1.1x."""
    small = ("matmul bf16 128 x 128 x 128 on cpu", 0.000025, 0.000025 * 49.7)
    large = ("matmul fp32 1024 x 1024 x 1024 on cpu", 0.0074, 0.0081)
    step = ("the cnn fp32 training step at batch 256 on cpu", 0.230, 0.240)
    verdict = judge(reading(0, {}), reading(10, {}), 2, [large, step], reported=[small])
    assert not verdict.busy and verdict.worst_spread == pytest.approx(49.7)
    assert verdict.worst_spread_counted == pytest.approx(0.240 / 0.230)
    assert "49.7x (matmul bf16 128 x 128 x 128 on cpu)" in spread_text(verdict)
    judged = judge(reading(0, {}), reading(10, {}), 2, [large, step, small])  # were it used, it would count
    assert judged.busy and "matmul bf16 128 x 128 x 128 on cpu took 49.7x" in judged.reasons[0]


def test_the_summary_rests_on_each_device_best_product_and_the_crossover():
    from gpufeed.bench.results import KernelResult
    from gpufeed.bench.summary import summarised_kernels

    def kernel(device, precision, size, tflops):
        return KernelResult(op="matmul", device=device, precision=precision, size=size, flops=1, seconds_median=1.0,
                            seconds_min=1.0, seconds_max=1.0, runs=3, tflops=tflops, fraction_of_peak=None,
                            tf32_matmul=None, tf32_cudnn=None)

    kernels = [kernel("cpu", "fp32", "128", 0.1), kernel("cpu", "fp32", "1024", 0.3),
               kernel("cpu", "bf16", "1024", 1.1), kernel("cuda:0", "bf16", "1024", 500.0),
               kernel("cuda:0", "fp32", "128", 0.05), kernel("cuda:0", "bf16", "128", 20.0)]
    only_cpu = summarised_kernels(kernels, ["cpu"])
    assert [(k.device, k.precision, k.size) for k in only_cpu] == [("cpu", "fp32", "1024")]
    both = summarised_kernels(kernels, ["cpu", "cuda:0"])
    assert [(k.device, k.precision, k.size) for k in both] == [
        ("cpu", "fp32", "128"), ("cpu", "fp32", "1024"), ("cuda:0", "bf16", "1024"), ("cuda:0", "fp32", "128")]
