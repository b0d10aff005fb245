"""The step's arithmetic (gpufeed.doctor.observe.flops): FLOPs counted by FlopCounterMode over one step, by operator,
precision and layout, equal to the hand-derived counts; the training results unchanged by the count; the Watcher
counting its last warm-up step and no watched step; and the tiny and compute-heavy scripts end to end (the tiny
one's count only: its verdict is a time per operator near its threshold on a busy machine, so test_arithmetic_rules.py
decides it on hand-made records).

A multiply-add counts 2. For Linear(i, o) on a batch of B: the forward's addmm is 2·B·i·o; the backward's weight
gradient (mm) is 2·B·i·o again, and the input's gradient another 2·B·i·o only when the input needs one (the first
layer's input, the data, does not)."""

from __future__ import annotations

import pytest
import torch
from test_inject import SCRIPTS
from torch import nn
from torch.utils import _python_dispatch

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observation import OperatorFlops
from gpufeed.doctor.observe.flops import FlopCount, step_arithmetic
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.hardware.peak import cpu_peak
from gpufeed.hardware.probe import probe_cpu


def sgd_step(model: nn.Module, optimizer, inputs, targets) -> None:
    loss = nn.functional.mse_loss(model(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def counted(step) -> tuple[OperatorFlops, ...] | None:
    count = FlopCount()
    count.start()
    step()
    count.stop()
    count.keep(True)
    return count.counted


def test_a_linear_step_counts_the_hand_derived_flops() -> None:
    torch.manual_seed(0)
    model, inputs, targets = nn.Linear(5, 1), torch.randn(32, 5), torch.randn(32, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    rows = counted(lambda: sgd_step(model, optimizer, inputs, targets))
    # forward addmm 2·32·5·1 = 320; backward weight gradient mm 320; no input gradient; mse and SGD count 0
    assert rows == (OperatorFlops("aten.addmm", "fp32", None, 320), OperatorFlops("aten.mm", "fp32", None, 320))
    assert _python_dispatch._get_current_dispatch_mode() is None  # the counter is gone after its step


def test_convolutions_record_their_layout_and_autocast_its_precision() -> None:
    torch.manual_seed(0)
    conv, images = nn.Conv2d(3, 8, 3, bias=False), torch.randn(2, 3, 10, 10)
    # 2 images x 8 outputs x 8x8 positions x 3·3·3 multiply-adds = 27,648 of them: 55,296 FLOPs
    assert counted(lambda: conv(images)) == (OperatorFlops("aten.convolution", "fp32", False, 55_296),)
    last = images.contiguous(memory_format=torch.channels_last)
    assert counted(lambda: conv.to(memory_format=torch.channels_last)(last))[0].channels_last is True
    linear, rows = nn.Linear(16, 4), torch.randn(8, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert counted(lambda: linear(rows)) == (OperatorFlops("aten.addmm", "bf16", None, 2 * 8 * 16 * 4),)


def test_counting_a_step_changes_no_training_result() -> None:
    def train(count_step: int | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        data, targets = torch.randn(5, 4, 3, 8, 8), torch.randn(5, 4, 2)
        for step in range(5):
            def run(inputs=data[step], wanted=targets[step]) -> None:
                sgd_step(model, optimizer, inputs, wanted)
            if step == count_step:
                assert counted(run)
            else:
                run()
        return [parameter.detach().clone() for parameter in model.parameters()]

    plain, observed = train(None), train(2)
    assert all(torch.equal(a, b) for a, b in zip(plain, observed, strict=True))  # bitwise, not close


def test_a_formula_that_fails_is_a_reason_not_an_error() -> None:
    count = FlopCount()
    count.start()
    formula = count.observed("aten.mm", lambda *args, **kwargs: 1 // 0)
    assert formula(torch.ones(2, 2), torch.ones(2, 2)) == 0  # the step goes on
    count.stop()
    count.keep(True)
    assert count.counted is None and count.failure == "not counted: aten.mm's formula failed (ZeroDivisionError)"
    arithmetic, notes = step_arithmetic(count, cuda=False, warmup=2)
    assert arithmetic is None and notes[0].subject == "FLOPs per step" and "ZeroDivisionError" in notes[0].text


def layer_step(watcher: Watcher, width: int, modes: list) -> None:
    """One step of a (width x width) matrix product: 2·width³ FLOPs, then a boundary; `modes` gets the dispatch
    mode active during the step."""
    modes.append(_python_dispatch._get_current_dispatch_mode())
    torch.ones(width, width) @ torch.ones(width, width)
    watcher.step_boundary("manual")


def test_the_watcher_counts_its_last_warmup_step_and_no_watched_one() -> None:
    watcher, modes = Watcher(steps=3, warmup=2, profile_steps=0), []
    for width in (2, 3, 4, 5, 6, 7):  # a start, warm-up steps 3 and 4 wide, then 3 watched
        layer_step(watcher, width, modes)
    assert watcher.done and watcher.flop_count.counted == (OperatorFlops("aten.mm", "fp32", None, 2 * 4 ** 3),)
    assert modes[2] is not None and [modes[i] for i in (0, 1, 3, 4, 5)] == [None] * 5
    seen = watcher.observe()
    assert seen.arithmetic.flops_per_step == 128 and seen.arithmetic.precision == "fp32"
    assert seen.arithmetic.peak_flops_per_s == pytest.approx(cpu_peak(probe_cpu(), "fp32").tflops * 1e12)


def test_without_a_warmup_step_nothing_is_counted_and_a_note_says_so() -> None:
    watcher, modes = Watcher(steps=2, warmup=0, profile_steps=0), []
    for width in (2, 3, 4):
        layer_step(watcher, width, modes)
    seen = watcher.observe()
    assert seen.arithmetic is None and modes == [None] * 3
    assert any(note.text.startswith("FLOPs per step: not counted: no warm-up step") for note in seen.notes)


def test_a_tiny_linear_fit_counts_its_hand_derived_flops() -> None:
    # The verdict is not asserted here: launch_overhead's first way needs at most 100 us per operator, and this
    # step's 17 operators take some 10 us each on an idle 2-core VM, 60 and more on a busy one. The same step (640
    # FLOPs, 20 operators, 0.2 ms) is judged launch_overhead on hand-made records in test_arithmetic_rules.py.
    watcher = Watcher(steps=3, warmup=2, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "tiny_linear.py"), [], False, watcher, timeout_s=30)
    arithmetic = watcher.observe().arithmetic
    assert outcome.problem is None and arithmetic.flops_per_step == 640  # the script's docstring
    assert arithmetic.operators == (OperatorFlops("aten.addmm", "fp32", None, 320),
                                    OperatorFlops("aten.mm", "fp32", None, 320))
    assert arithmetic.precision == "fp32"
    assert arithmetic.peak_flops_per_s == pytest.approx(cpu_peak(probe_cpu(), "fp32").tflops * 1e12)


@pytest.mark.timing
def test_a_wide_mlp_keeps_compute_bound_with_its_hand_derived_flops_and_bf16_where_the_cpu_has_it() -> None:
    # 20 watched steps: in 5, one slow moment of a loaded host between two steps (the loop's own slicing of its
    # batch, counted as its input) made input_bound the verdict
    watcher = Watcher(steps=20, warmup=1)
    outcome = run_script(str(SCRIPTS / "compute_bound.py"), [], False, watcher, timeout_s=30)
    report = diagnose(watcher.observe())
    # the verdict: 0.26 of the fp32 peak against the thousandth below which a step is overhead-bound, and under 200
    # operators a step on the CPU: far from either threshold of launch_overhead
    # batch 64 through 512 -> 512 -> 512 -> 10: forward 2·64·(512·512 + 512·512 + 512·10) = 67,764,224; the
    # weight gradients the same; the input gradients of the last two layers 2·64·(512·512 + 512·10) = 34,209,792
    assert outcome.problem is None and watcher.observe().arithmetic.flops_per_step == 2 * 67_764_224 + 34_209_792
    assert report.verdict.primary == "compute_bound" and "launch_overhead" not in [f.kind for f in report.findings]
    healthy = next(f for f in report.findings if f.kind == "compute_bound")
    assert "channels_last" not in healthy.fix + healthy.snippet  # no convolution was seen
    cpu = probe_cpu()  # AMX-BF16 or AVX512-BF16: bf16 autocast; else nothing of bf16 (or a sentence against it)
    assert ("torch.bfloat16" in healthy.snippet) is (cpu.amx_bf16 is True or cpu.avx512_bf16 is True)
