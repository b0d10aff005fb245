"""The profiled window (gpufeed.doctor.observe.profile): the trace analysis on hand-made events, with every count and
interval derived by hand, and the StepProfiler on a real loop of known operators on the CPU."""

from __future__ import annotations

import os
import time

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from gpufeed.doctor.observation import ProfiledStep, ProfileSummary, ProfileWindow
from gpufeed.doctor.observe.profile import StepProfiler, TraceEvent, analyse, union_length

MAIN, AUTOGRAD, PIN = 1, 2, 3


def host(name, start, end, thread=MAIN, kind="cpu_op", id=0, linked=0):
    return TraceEvent(name, thread, float(start), float(end), False, kind, id, linked)


def device(name, start, end, linked, kind="kernel"):
    return TraceEvent(name, 7, float(start), float(end), True, kind, 0, linked)


def test_union_length_counts_overlaps_once():
    assert union_length([]) == 0.0
    assert union_length([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25.0  # [0, 15] and [20, 30]
    assert union_length([(3, 4), (0, 1)]) == 2.0


def trace() -> list[TraceEvent]:
    """Two recorded steps (marks 1 and 2, mark 0 the warm-up), microseconds:
    step 1 [100, 200): aten::linear [110, 140) holding aten::addmm [115, 135) (id 11), aten::relu [150, 160)
      (id 12), the DataLoader [160, 175), an autograd function [175, 190) on another thread holding
      aten::mm [176, 189); a pin-memory thread's aten::copy_ [100, 200) is not the step's work.
      Kernels: addmm's [120, 125) and [124, 160) (overlap 1 us), relu's [205, 210) (runs after the step ended,
      still the step's: its operator started in it), an unlinked kernel at [190, 195), a copy and a device-side
      step annotation (neither is a kernel).
    step 2 [200, 400): aten::add [250, 260) (id 21) launching [255, 258); nothing else."""
    return [host("ProfilerStep#0", 0, 100, kind="user_annotation"),
            host("aten::mul", 10, 20, id=1), device("warm-up kernel", 12, 14, linked=1),
            host("ProfilerStep#1", 100, 200, kind="user_annotation"),
            host("aten::linear", 110, 140), host("aten::addmm", 115, 135, id=11), host("aten::relu", 150, 160, id=12),
            host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 160, 175, kind="user_annotation"),
            host("autograd::engine::evaluate_function: MmBackward0", 175, 190, thread=AUTOGRAD),
            host("aten::mm", 176, 189, thread=AUTOGRAD, id=13),
            host("aten::copy_", 100, 200, thread=PIN),
            host("cudaLaunchKernel", 116, 118, kind="cuda_runtime", id=901, linked=11),
            device("gemm", 120, 125, linked=11), device("gemm tail", 124, 160, linked=11),
            device("relu kernel", 205, 210, linked=12), device("stray", 190, 195, linked=999),
            device("Memcpy HtoD", 130, 150, linked=11, kind="gpu_memcpy"),
            device("ProfilerStep#1", 100, 200, linked=0, kind="gpu_user_annotation"),
            host("ProfilerStep#2", 200, 400, kind="user_annotation"),
            host("aten::add", 250, 260, id=21), device("add kernel", 255, 258, linked=21),
            host("ProfilerStep#3", 400, 450, kind="user_annotation")]  # not recorded: the window ended at 2


def test_operators_outside_time_and_the_loader_per_step():
    first, second = analyse(trace(), recorded=2, cuda=False)
    # step 1: top-level aten: linear (addmm inside it), relu, mm on the autograd thread; the pin thread's copy_ no
    assert (first.index, first.operators) == (0, 3)
    # covered: [110, 140) + [150, 160) + loader [160, 175) + [175, 190) = 30 + 10 + 15 + 15 = 70 of 100 us
    assert first.wall_s == pytest.approx(100e-6) and first.outside_operators_s == pytest.approx(30e-6)
    assert first.loader_s == pytest.approx(15e-6)
    assert first.kernels is None and first.kernel_busy_s is None  # CUDA not traced
    assert (second.operators, second.wall_s, second.outside_operators_s) == (1, pytest.approx(200e-6),
                                                                             pytest.approx(190e-6))


def test_kernels_are_counted_in_the_step_that_launched_them():
    first, second = analyse(trace(), recorded=2, cuda=True)
    # gemm, gemm tail, relu kernel (linked to operators in step 1) and the stray kernel (its own start, 190)
    assert first.kernels == 4 and first.short_kernels == 3  # 5, 36, 5, 5 us: one is 20 us or longer
    assert first.kernel_s == pytest.approx((5 + 36 + 5 + 5) * 1e-6)
    assert first.kernel_busy_s == pytest.approx((40 + 5 + 5) * 1e-6)  # [120, 160), [190, 195), [205, 210)
    assert (second.kernels, second.short_kernels, second.kernel_busy_s) == (1, 1, pytest.approx(3e-6))


def test_an_unlinked_runtime_call_with_an_operators_id_does_not_take_its_kernels():
    # CUPTI numbers runtime calls apart from torch's operators: a synchronize outside any operator (linked 0) in
    # step 2 with id 11 must not be taken for aten::addmm (id 11, step 1), whose kernels stay in step 1
    events = trace()
    events.insert(events.index(host("ProfilerStep#3", 400, 450, kind="user_annotation")),
                  host("cudaDeviceSynchronize", 300, 390, kind="cuda_runtime", id=11))
    first, second = analyse(events, recorded=2, cuda=True)
    assert (first.kernels, second.kernels) == (4, 1)


def test_no_marks_no_steps_and_only_the_recorded_marks_count():
    assert analyse(trace(), recorded=0, cuda=True) == []
    assert [step.index for step in analyse(trace(), recorded=1, cuda=True)] == [0]
    assert analyse([host("aten::add", 0, 1)], recorded=5, cuda=False) == []


def test_the_window_the_findings_read():
    steps = (ProfiledStep(0, 0.010, 1000, 0.004, 0.001, 500, 400, 0.002, 0.0015),
             ProfiledStep(1, 0.030, 1200, 0.006, 0.002, 700, 500, 0.004, 0.0025))
    summary = ProfileSummary(steps, requested=5, cuda=True, reason="2 of 5 steps profiled (the loop ended first)")
    window = ProfileWindow.of(summary)
    assert len(window.steps) == 2 and window.requested == 5
    assert window.step_ms == pytest.approx(20.0) and window.operators_per_step == pytest.approx(1100.0)
    assert window.outside_operators_share == pytest.approx(0.010 / 0.040)
    assert window.kernels_per_step == pytest.approx(600.0)
    assert window.short_kernel_fraction == pytest.approx(900 / 1200)
    assert window.mean_kernel_us == pytest.approx(1e6 * 0.006 / 1200)
    assert window.kernel_busy_share == pytest.approx(0.004 / 0.040)
    assert [step.operators for step in window.steps] == [1000, 1200]
    cpu = ProfileWindow.of(ProfileSummary(steps, 2, cuda=False))
    assert cpu.kernels_per_step is None and cpu.kernel_busy_share is None
    assert ProfileWindow.of(ProfileSummary((), 5, cuda=False, reason="x")) is None


def run_steps(profiler: StepProfiler, steps: int, adds: int = 7, muls: int = 3, pause_s: float = 0.0) -> bool:
    """Each step: `adds` torch.add and `muls` torch.mul on small tensors, then a pause, then the boundary."""
    a, b = torch.ones(4), torch.ones(4)
    for _ in range(steps):
        for _ in range(adds):
            torch.add(a, b)
        for _ in range(muls):
            torch.mul(a, b)
        time.sleep(pause_s)
        if profiler.step():
            return True
    return False


@pytest.mark.timing
def test_a_real_trace_counts_exactly_the_operators_of_each_step():
    profiler = StepProfiler(steps=3)
    assert profiler.start()
    assert run_steps(profiler, 10, pause_s=0.005)  # 1 warm-up step and 3 recorded: done at the 4th boundary
    summary = profiler.finish()
    assert summary.reason is None and summary.requested == 3 and not summary.cuda
    assert [step.operators for step in summary.steps] == [10, 10, 10]
    assert all(step.outside_operators_s >= 0.005 for step in summary.steps)  # the sleep is outside operators
    assert not torch._C._autograd._profiler_enabled()  # stopped


def test_a_window_cut_short_keeps_the_complete_steps_and_says_why():
    profiler = StepProfiler(steps=5)
    assert profiler.start()
    assert not run_steps(profiler, 3)  # warm-up, 2 recorded, the third under way when the loop ends
    summary = profiler.finish("the loop ended first")
    assert [step.operators for step in summary.steps] == [10, 10]
    assert summary.reason == "2 of 5 steps profiled (the loop ended first)"
    assert ProfileWindow.of(ProfileSummary((), 5, False)) is None
    ended_at_once = StepProfiler(steps=5)
    assert ended_at_once.start()
    assert ended_at_once.finish("the loop ended first").steps == ()


def test_the_scripts_own_profiler_is_left_alone():
    own = profile(activities=[ProfilerActivity.CPU])
    own.start()
    try:
        profiler = StepProfiler(steps=2)
        assert not profiler.start()
        summary = profiler.finish()
        assert summary.steps == () and "the script's own" in summary.reason
        torch.add(torch.ones(2), torch.ones(2))
    finally:
        own.stop()
    assert any(event.name == "aten::add" for event in own.events())  # its trace is intact


def test_kineto_usdt_lines_are_dropped_and_every_other_line_is_kept(capfd):
    from gpufeed.measure.quiet import without_kineto_noise

    with without_kineto_noise():
        os.write(2, b"USDT:2026-11-30 06:15:22 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"the script's own warning\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "USDT" not in err
    assert err == "the script's own warning\nafter\n"
