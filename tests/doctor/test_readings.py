"""The findings that read more than the step records, on hand-built observations: launch_overhead from the
profiled window (operators on the CPU, kernels on a GPU), memory_pressure from the host samples' RAM, sync_stall
against the profiled kernels' idle share, and small_batch from GPM's SM activity; evidence equal to hand
arithmetic."""

import pytest
from observations import by_kind, host, on_cpu, on_gpu, profiled, steps, with_sm

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observation import MemoryReading

# --- launch_overhead from the profiled window (findings/kinds/launch_overhead.py) ---------------------------------


def test_many_small_operators_on_the_cpu_are_launch_overhead():
    report = diagnose(on_cpu(steps(20, wall=0.004, batch=4), host(), batch_size=4, profile=profiled()))
    found = by_kind(report)["launch_overhead"]
    assert report.verdict.primary == "launch_overhead"
    assert found.share == pytest.approx(0.43) and found.severity == "high" and found.confidence == "high"
    assert found.evidence["operators_per_step"] == 1300
    assert found.evidence["outside_operators_share"] == pytest.approx(0.43)
    assert found.evidence["host_us_per_operator"] == pytest.approx(4000 / 1300)  # 4 ms watched step / 1300
    assert found.evidence["profiled_step_ms"] == pytest.approx(20.0) and found.evidence["profiled_steps"] == 5
    assert "torch.compile(model)" in found.snippet and "batch_size=16" in found.snippet


@pytest.mark.parametrize("operators, outside, expected", [(1300, 0.19, None), (1300, 0.20, "medium"),
                                                          (1300, 0.39, "medium"), (1300, 0.40, "high"),
                                                          (199, 0.60, None), (200, 0.60, "high")])
def test_cpu_launch_thresholds_200_operators_and_20_and_40_percent_outside(operators, outside, expected):
    seen = on_cpu(steps(20), host(), profile=profiled(operators=operators, outside=outside))
    found = by_kind(diagnose(seen)).get("launch_overhead")
    assert (found.severity if found else None) == expected


def test_a_cpu_loop_with_few_profiled_steps_agreeing_has_lower_confidence():
    seen = on_cpu(steps(20), host(), profile=profiled(steps=2))
    assert by_kind(diagnose(seen))["launch_overhead"].confidence == "medium"


def test_a_cpu_loop_without_a_profile_is_not_judged_on_launches():
    report = diagnose(on_cpu(steps(20), host()))
    assert "launch_overhead" not in by_kind(report)
    assert any(line.startswith("operators and kernel launches: not profiled") for line in report.unmeasured)


def test_kernels_with_gaps_between_them_are_launch_overhead_on_a_gpu():
    # the CUDA-event span says busy 95%; the profiled kernels cover 0.2 of a 0.15 s profiled step = 30 ms per
    # step, 0.3 of the 0.1 s watched step: 70% idle, 70 us per launch for 1000 short kernels
    window = profiled(wall=0.15, kernels=1000, short=900, kernel_s=0.025, busy=0.2)
    report = diagnose(on_gpu(steps(20, compute=0.095), host(), profile=window))
    found = by_kind(report)["launch_overhead"]
    assert report.verdict.primary == "launch_overhead" and report.verdict.device_busy == pytest.approx(0.3)
    assert found.share == pytest.approx(0.7) and found.severity == "high" and found.confidence == "high"
    assert found.evidence["device_busy"] == pytest.approx(0.3)
    assert found.evidence["event_span_busy"] == pytest.approx(0.95)
    assert found.evidence["idle_us_per_launch"] == pytest.approx(0.07 / 1000 * 1e6)
    assert found.evidence["short_kernel_fraction"] == pytest.approx(0.9)
    assert found.evidence["mean_kernel_us"] == pytest.approx(25.0)
    assert "reduce-overhead" in found.snippet
    assert "compute_bound" not in by_kind(report)  # the event span alone would have called it healthy


@pytest.mark.parametrize("change", [{"busy": 0.34}, {"short": 400}, {"kernels": 500, "short": 450}])
def test_busy_devices_long_kernels_and_long_gaps_are_not_launch_overhead(change):
    # busy 0.34 of 0.15 s = 51 ms, over half the 0.1 s step; 400 of 1000 short is under half; 500 kernels leave
    # 0.07 s / 500 = 140 us per launch, beyond HTA's 100 us launch delay
    fields = {"wall": 0.15, "kernels": 1000, "short": 900, "kernel_s": 0.025, "busy": 0.2, **change}
    report = diagnose(on_gpu(steps(20, compute=0.095), host(), profile=profiled(**fields)))
    assert "launch_overhead" not in by_kind(report)


def test_an_input_bound_gpu_is_not_launch_overhead():
    window = profiled(wall=0.15, kernels=1000, short=900, kernel_s=0.025, busy=0.2)
    report = diagnose(on_gpu(steps(20, compute=0.095, wait=0.06), host(), profile=window))
    assert "launch_overhead" not in by_kind(report) and report.verdict.primary == "input_bound"


# --- host RAM in memory_pressure ----------------------------------------------------------------------------


def test_host_ram_at_90_percent_is_memory_pressure_with_its_evidence():
    report = diagnose(on_cpu(steps(20), host(ram=0.95)))
    found = by_kind(report)["memory_pressure"]
    assert (found.severity, found.share, found.confidence) == ("low", 0.0, "high")
    assert found.evidence["host_ram_used_fraction"] == pytest.approx(0.95, abs=1e-9)
    assert found.evidence["host_ram_total_gib"] == pytest.approx(64.0)
    assert found.evidence["host_ram_used_gib"] == pytest.approx(0.95 * 64, abs=1e-6)
    assert (found.evidence["host_samples"], found.evidence["host_samples_full"]) == (10, 10)
    assert found.evidence["peak_fraction"] is None  # no device memory on the CPU
    assert "Host RAM is nearly full" in found.fix and "Device memory" not in found.fix
    assert report.verdict.primary == "compute_bound"  # a full RAM claims no share of the step


def test_host_ram_below_90_percent_and_unread_ram_are_no_finding():
    assert "memory_pressure" not in by_kind(diagnose(on_cpu(steps(20), host(ram=0.89))))
    report = diagnose(on_cpu(steps(20), host()))
    assert "memory_pressure" not in by_kind(report)
    assert "host RAM: no background sample read it" in report.unmeasured


def test_the_fullest_sample_counts_and_device_and_host_evidence_combine():
    samples = host(ram=0.5) + host(ram=0.93, count=2)
    memory = MemoryReading(76 * 2**30, 80 * 2**30, 0)
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.09), samples, memory=memory)))["memory_pressure"]
    assert found.evidence["host_ram_used_fraction"] == pytest.approx(0.93, abs=1e-9)
    assert (found.evidence["host_samples"], found.evidence["host_samples_full"]) == (12, 2)
    assert found.evidence["peak_fraction"] == pytest.approx(0.95)
    assert "Device memory" in found.fix and "Host RAM" in found.fix


def test_a_sync_costs_the_idle_share_the_profiled_kernels_leave():
    # the event span reads 97% busy, so a 30% sync share would cost 3%; the kernels cover 0.06 s of the 0.1 s step
    window = profiled(wall=0.15, kernels=100, short=10, kernel_s=0.06, busy=0.4)
    seen = on_gpu(steps(20, compute=0.097, syncs=1, sync=0.03), host(), profile=window)
    found = by_kind(diagnose(seen))["sync_stall"]
    assert found.evidence["device_busy"] == pytest.approx(0.6) and found.share == pytest.approx(0.3)


def test_busy_kernels_that_occupy_few_sms_are_an_underfilled_device():
    # kernels run 95% of every 100 ms step (healthy by the event span) but GPM says 30% of the SMs were active
    report = diagnose(on_gpu(steps(20, compute=0.095, batch=256), with_sm(host(gpu=100.0), 30.0)))
    found = by_kind(report)["small_batch"]
    assert found.share == pytest.approx(0.95 * 0.70)  # busy x idle SM share: 0.665, by hand
    assert found.severity == "high" and found.confidence == "medium"  # 10 supporting samples
    assert found.evidence["sm_activity_percent"] == pytest.approx(30.0)
    assert found.evidence["nvml_utilization_percent"] == pytest.approx(100.0)
    assert "30% of the SMs" in found.fix
    assert report.verdict.primary == "small_batch"


def test_sm_activity_at_or_above_half_keeps_a_busy_device_healthy():
    report = diagnose(on_gpu(steps(20, compute=0.095, batch=256), with_sm(host(gpu=100.0), 50.0)))
    assert "small_batch" not in by_kind(report) and report.verdict.primary == "compute_bound"
    assert by_kind(report)["compute_bound"].evidence["sm_activity_percent"] == pytest.approx(50.0)
    # without GPM readings nothing is claimed about SMs
    report = diagnose(on_gpu(steps(20, compute=0.095, batch=256), host(gpu=100.0)))
    assert "small_batch" not in by_kind(report)
    assert by_kind(report)["compute_bound"].evidence["sm_activity_percent"] is None
