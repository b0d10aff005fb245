"""The rules that read the step's arithmetic (Observation.arithmetic, flops.py), on hand-built observations:
launch_overhead for a step that does almost no arithmetic for its time (findings/kinds/launch_overhead.py), and the
advice compute_bound chooses from what the step computes (findings/kinds/compute_bound.py); evidence equal to hand
arithmetic."""

import pytest
from observations import by_kind, host, on_cpu, on_gpu, profiled, steps

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.kinds.launch_overhead import ARITHMETIC_FRACTION_OF_PEAK, OVERHEAD_US_PER_OPERATOR
from gpufeed.doctor.observation import OperatorFlops, StepArithmetic

PEAK = 1e11  # FLOP/s: a made-up device, so that every figure below is round


def arithmetic(*rows: tuple[str, str, bool | None, int], peak: float | None = PEAK,
               bf16_native: bool | None = True) -> StepArithmetic:
    operators = tuple(OperatorFlops(*row) for row in rows)
    total = sum(row.flops for row in operators)
    precision = max(operators, key=lambda row: row.flops).precision if total else None
    return StepArithmetic(total, operators, precision, peak, "a test's peak", bf16_native)


TINY = arithmetic(("aten.addmm", "fp32", None, 320), ("aten.mm", "fp32", None, 320))  # Linear(5, 1), batch 32
MLP = arithmetic(("aten.mm", "fp32", None, 6 * 10**8), ("aten.addmm", "fp32", None, 4 * 10**8))
CNN = arithmetic(("aten.convolution_backward", "fp32", None, 6 * 10**8), ("aten.convolution", "fp32", False, 3 * 10**8),
                 ("aten.mm", "fp32", None, 10**8))


def test_a_step_of_640_flops_in_200_us_is_launch_overhead():
    # 20 steps of 0.2 ms, 20 operators each: 10 us an operator; 640 FLOPs in 0.2 ms is 3.2e6 FLOP/s, 3.2e-5 of
    # the peak; at the peak they take 6.4 ns of the 200 us
    seen = on_cpu(steps(20, wall=0.0002, batch=32), host(), batch_size=32, arithmetic=TINY,
                  profile=profiled(operators=20, outside=0.3, wall=0.0004))
    report = diagnose(seen)
    found = by_kind(report)["launch_overhead"]
    assert report.verdict.primary == "launch_overhead" and "compute_bound" not in by_kind(report)
    assert found.severity == "high" and found.confidence == "high"
    assert found.share == pytest.approx(1 - 640 / PEAK / 0.0002)
    evidence = found.evidence
    assert evidence["flops_per_step"] == 640 and evidence["operators_per_step"] == 20
    assert evidence["us_per_operator"] == pytest.approx(10.0)
    assert evidence["achieved_flops_per_s"] == pytest.approx(3.2e6)
    assert evidence["fraction_of_peak"] == pytest.approx(3.2e-5) and evidence["peak_flops_per_s"] == PEAK
    assert evidence["arithmetic_us_at_peak"] == pytest.approx(0.0064) and evidence["precision"] == "fp32"
    assert evidence["mean_step_ms"] == pytest.approx(0.2)
    assert "batch_size = 512" in found.snippet and "torch.compile" not in found.snippet  # 20 operators: no fusing
    assert "640 FLOPs" in found.fix and "20 operators" in found.fix


def test_the_data_wait_is_not_claimed_as_overhead():
    # half of each 0.4 ms step waits for the loader: the rule reads the other 0.2 ms, and claims only it
    seen = on_cpu(steps(20, wall=0.0004, wait=0.0002), host(), arithmetic=TINY, profile=profiled(operators=20))
    found = by_kind(diagnose(seen))["launch_overhead"]
    assert found.share == pytest.approx(0.5 - 640 / PEAK / 0.0004)
    assert found.evidence["us_per_operator"] == pytest.approx(10.0)


@pytest.mark.parametrize("flops, operators, fires", [
    (ARITHMETIC_FRACTION_OF_PEAK * PEAK * 0.0002 * 0.99, 20, True),  # just under a thousandth of the peak
    (ARITHMETIC_FRACTION_OF_PEAK * PEAK * 0.0002 * 1.01, 20, False),  # just over
    (640, 0.0002 * 1e6 / OVERHEAD_US_PER_OPERATOR * 1.01, True),  # just under 100 us an operator
    (640, 0.0002 * 1e6 / OVERHEAD_US_PER_OPERATOR * 0.99, False)])  # just over: the time is not dispatching
def test_overhead_thresholds_a_thousandth_of_the_peak_and_100_us_an_operator(flops, operators, fires):
    # profiled(outside=0.0): the CPU's Python-share way stays quiet, so only the arithmetic decides
    seen = on_cpu(steps(20, wall=0.0002), host(), arithmetic=arithmetic(("aten.mm", "fp32", None, int(flops))),
                  profile=profiled(operators=operators, outside=0.0))
    assert ("launch_overhead" in by_kind(diagnose(seen))) is fires


def test_without_a_peak_or_a_profile_the_arithmetic_is_not_judged():
    unknown = arithmetic(("aten.mm", "fp32", None, 640), peak=None)
    assert "launch_overhead" not in by_kind(diagnose(on_cpu(steps(20, wall=0.0002), host(), arithmetic=unknown,
                                                            profile=profiled(operators=20, outside=0.0))))
    report = diagnose(on_cpu(steps(20, wall=0.0002), host(), arithmetic=TINY))
    assert "launch_overhead" not in by_kind(report) and report.verdict.primary == "compute_bound"


def test_a_busy_gpu_is_not_overhead_bound_however_few_its_flops():
    # kernels cover 0.9 of each profiled step: the device works (memory-bound kernels, say), it waits on no host
    busy = profiled(wall=0.0002, operators=20, outside=0.0, kernels=20, short=0, kernel_s=0.00018, busy=0.9)
    seen = on_gpu(steps(20, wall=0.0002, compute=0.00019), host(gpu=95.0), arithmetic=TINY, profile=busy)
    assert "launch_overhead" not in by_kind(diagnose(seen))


def test_the_python_share_way_keeps_its_evidence_beside_the_arithmetic():
    # 1300 operators in 4 ms, 43% outside them (test_readings.py's case) and 640 FLOPs: both ways fire
    seen = on_cpu(steps(20, wall=0.004, batch=4), host(), batch_size=4, profile=profiled(), arithmetic=TINY)
    found = by_kind(diagnose(seen))["launch_overhead"]
    assert found.share == pytest.approx(1 - 640 / PEAK / 0.004)  # the larger share: the arithmetic's
    assert found.evidence["outside_operators_share"] == pytest.approx(0.43)
    assert found.evidence["flops_per_step"] == 640 and "torch.compile(model)" in found.snippet  # 1300 operators


# --- compute_bound's advice, from what the step computes (findings/kinds/compute_bound.py) ---------------------------


def healthy(seen) -> tuple[str, str]:
    found = by_kind(diagnose(seen))["compute_bound"]
    return found.fix, found.snippet


def test_a_convolutional_model_is_told_channels_last_and_bf16():
    fix, snippet = healthy(on_cpu(steps(20), host(), arithmetic=CNN))
    assert "channels_last" in snippet and "90% of the FLOPs on NCHW" in fix  # 3e8 forward + 6e8 backward of 1e9
    assert "torch.bfloat16" in snippet and "torch.autocast(\"cpu\"" in snippet


def test_an_fp32_mlp_is_told_bf16_and_not_channels_last():
    fix, snippet = healthy(on_cpu(steps(20), host(), arithmetic=MLP))
    assert "torch.bfloat16" in snippet and "100% of the FLOPs" in fix
    assert "channels_last" not in fix + snippet and "torch.compile" not in snippet


def test_a_cpu_without_native_bf16_is_not_told_bf16_autocast():
    no_bf16 = arithmetic(("aten.mm", "fp32", None, 10**9), bf16_native=False)
    fix, snippet = healthy(on_cpu(steps(20), host(), arithmetic=no_bf16))
    assert "autocast" not in snippet and "would not speed them up" in fix
    unknown = arithmetic(("aten.mm", "fp32", None, 10**9), bf16_native=None)
    fix, snippet = healthy(on_cpu(steps(20), host(), arithmetic=unknown))
    assert "bf16" not in fix + snippet  # not known either way: nothing said


def test_a_model_already_in_bf16_is_told_torch_compile_and_a_channels_last_one_is_not_told_the_layout():
    bf16 = arithmetic(("aten.convolution", "bf16", True, 10**9), ("aten.mm", "fp32", None, 10**8))
    fix, snippet = healthy(on_gpu(steps(20, compute=0.095), host(gpu=98.0), arithmetic=bf16))
    assert "torch.compile(model)" in snippet and "already run in bf16" in fix
    assert "channels_last" not in snippet and "a faster GPU" in fix


def test_without_the_count_compute_bound_names_no_change():
    fix, snippet = healthy(on_cpu(steps(20), host()))
    assert snippet == "" and "not counted" in fix
    assert by_kind(diagnose(on_cpu(steps(20), host(), arithmetic=MLP)))["compute_bound"].evidence[
        "fraction_of_peak"] == pytest.approx(1e9 / 0.1 / PEAK)  # 1e9 FLOPs in each 0.1 s step
