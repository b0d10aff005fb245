"""The doctor's rules on hand-built step sequences: each kind fires where it should, with evidence equal to hand
arithmetic, and healthy sequences raise no alarm."""

import dataclasses
import json
import random

import pytest

from gpufeed.doctor.profile import ProfiledStep, ProfileSummary
from gpufeed.doctor.report import KINDS
from gpufeed.doctor.rules import diagnose, slow_outliers, stall_period
from gpufeed.measure.steps import HostSample, StepRecord


def step(index, wall=0.1, wait=0.0, copy=0.0, copy_bytes=0, pageable=0, compute=None, syncs=0, sync=0.0,
         batch=None, float64=0, launches=None):
    return StepRecord(index=index, start_s=index * wall, wall_s=wall, data_wait_s=wait, copy_s=copy,
                      copy_bytes=copy_bytes, copy_pageable_bytes=pageable, compute_s=compute, sync_count=syncs,
                      sync_s=sync, batch_size=batch, float64_ops=float64, kernel_launches=launches)


def steps(count=20, **fields):
    return [step(index, **fields) for index in range(count)]


def host(cpu=50.0, gpu=None, count=10, ram=None, ram_total=64 * 2**30):
    """`ram`: the used fraction of `ram_total` in every sample (None: not read)."""
    return [HostSample(time_s=0.1 * i, cpu_percent=cpu, cpu_per_core_percent=(), gpu_utilization_percent=gpu,
                       gpu_memory_used_bytes=None, ram_used_bytes=None if ram is None else int(ram * ram_total),
                       ram_total_bytes=None if ram is None else ram_total) for i in range(count)]


def profiled(steps=5, wall=0.02, operators=1300, outside=0.43, kernels=None, short=None, kernel_s=None, busy=None):
    """The context's `profile` entry for `steps` identical profiled steps of `wall` seconds; `outside` and `busy`
    are shares of the step, `kernel_s` seconds per step."""
    cuda = kernels is not None
    rows = [ProfiledStep(i, wall, operators, outside * wall, 0.0, kernels, short, kernel_s,
                         busy * wall if cuda else None) for i in range(steps)]
    return ProfileSummary(tuple(rows), steps, cuda).as_context()


CPU = {"device": "cpu", "cpu_count": 8, "threads": 8, "loader_workers": 0, "loader_pin_memory": False,
       "batch_size": 64, "dtype_float64_seen": False, "autocast_seen": False, "unmeasured": []}
GPU = {"device": "cuda:0", "cpu_count": 16, "threads": 8, "loader_workers": 8, "loader_pin_memory": True,
       "batch_size": 256, "dtype_float64_seen": False, "autocast_seen": True, "memory_peak_bytes": 40 * 2**30,
       "memory_capacity_bytes": 80 * 2**30, "allocator_retries": 0, "unmeasured": []}


def by_kind(report):
    kinds = [f.kind for f in report.findings]
    assert len(kinds) == len(set(kinds)), "one finding per kind"
    return {f.kind: f for f in report.findings}


def serious(report):
    return [f.kind for f in report.findings if f.severity in ("high", "medium")]


def test_input_bound_half_the_step_waiting_is_high():
    report = diagnose(steps(20, wait=0.05), host(), {**CPU, "cpu_count": 16, "loader_workers": 2})
    found = by_kind(report)["input_bound"]
    assert found.share == pytest.approx(0.5) and found.severity == "high" and found.confidence == "high"
    assert found.evidence["data_wait_share"] == pytest.approx(0.5)
    assert found.evidence["mean_wait_ms"] == pytest.approx(50.0)
    assert found.evidence["loader_workers"] == 2 and found.evidence["pin_memory"] is False
    assert found.evidence["suggested_workers"] == 8  # min(16 cores, 8)
    assert "num_workers=8" in found.snippet and "gpufeed.Feed" in found.snippet
    assert report.verdict.primary == "input_bound"
    assert report.verdict.data_wait == pytest.approx(0.5) and report.verdict.steps == 20
    assert report.verdict.device == "cpu" and report.verdict.device_busy is None


@pytest.mark.parametrize("wait_s, expected", [(0.0049, None), (0.0051, "medium"), (0.0199, "medium"),
                                              (0.0201, "high")])
def test_input_share_thresholds_at_5_and_20_percent(wait_s, expected):
    report = diagnose(steps(40, wait=wait_s), host(), CPU)
    found = by_kind(report).get("input_bound")
    assert (found.severity if found else None) == expected
    if found:
        assert found.share == pytest.approx(wait_s / 0.1)


def test_suggested_workers_follow_the_cores_below_eight():
    found = by_kind(diagnose(steps(20, wait=0.03), host(), {**CPU, "cpu_count": 4}))["input_bound"]
    assert found.evidence["suggested_workers"] == 4 and "num_workers=4" in found.snippet


def test_healthy_cpu_steps_are_compute_bound_without_alarms():
    report = diagnose(steps(50, batch=64), host(cpu=60.0), CPU)
    assert report.verdict.primary == "compute_bound" and serious(report) == []
    healthy = by_kind(report)["compute_bound"]
    assert healthy.severity == "info" and healthy.share == pytest.approx(1.0)
    assert report.model_samples_per_s == pytest.approx(640.0)  # 64 samples / 0.1 s
    assert report.loader_samples_per_s is None  # the loader keeps up: its rate is not seen


def test_healthy_gpu_steps_are_compute_bound_without_alarms():
    report = diagnose(steps(50, compute=0.095, batch=256, launches=200), host(cpu=30.0, gpu=98.0), GPU)
    assert report.verdict.primary == "compute_bound" and serious(report) == []
    assert report.verdict.device_busy == pytest.approx(0.95)
    assert by_kind(report)["compute_bound"].share == pytest.approx(0.95)


def test_cpu_oversubscribed_threads_and_workers():
    context = {**CPU, "threads": 8, "loader_workers": 4, "cpu_count": 8}
    found = by_kind(diagnose(steps(20), host(cpu=95.0, count=30), context))["cpu_saturated"]
    assert found.share == pytest.approx(1 - 8 / 12) and found.severity == "high"
    assert found.evidence["cpu_percent"] == pytest.approx(95.0)
    assert (found.evidence["threads"], found.evidence["loader_workers"], found.evidence["cpu_count"]) == (8, 4, 8)
    assert found.confidence == "high"  # 30 samples above 90%
    assert "torch.set_num_threads(4)" in found.snippet  # 8 cores - 4 workers


def test_busy_cpu_with_matching_threads_is_not_saturation():
    report = diagnose(steps(20), host(cpu=99.0), {**CPU, "threads": 8, "loader_workers": 0, "cpu_count": 8})
    assert "cpu_saturated" not in by_kind(report)


def test_cpu_bottleneck_on_gpu_when_device_idles():
    found = by_kind(diagnose(steps(20, compute=0.005), host(cpu=97.0), GPU))["cpu_saturated"]
    assert found.share == pytest.approx(0.95) and found.evidence["device_busy"] == pytest.approx(0.05)


def test_host_to_device_copy_share():
    records = steps(20, compute=0.08, copy=0.02, copy_bytes=2**20 * 64)
    found = by_kind(diagnose(records, host(), GPU))["host_to_device"]
    assert found.share == pytest.approx(0.2) and found.severity == "high"
    assert found.evidence["mean_copy_ms"] == pytest.approx(20.0)
    assert found.evidence["copy_mib_per_step"] == pytest.approx(64.0)
    assert found.evidence["copy_gb_per_s"] == pytest.approx(2**26 / 0.02 / 1e9)
    assert found.evidence["pageable_fraction"] == 0.0


def test_pageable_copies_flag_with_low_severity_when_cheap():
    records = steps(20, compute=0.095, copy=0.001, copy_bytes=1000, pageable=800)
    found = by_kind(diagnose(records, host(), GPU))["host_to_device"]
    assert found.severity == "low" and found.evidence["pageable_fraction"] == pytest.approx(0.8)
    assert "pin_memory=True" in found.snippet and "non_blocking=True" in found.snippet


def test_no_copy_finding_on_the_cpu():
    assert "host_to_device" not in by_kind(diagnose(steps(20, copy=0.05, copy_bytes=10**6), host(), CPU))


def test_launch_overhead_from_the_event_span_when_kernels_were_not_profiled():
    report = diagnose(steps(20, compute=0.03, launches=500), host(), GPU)
    found = by_kind(report)["launch_overhead"]
    assert any(line.startswith("operators and kernel launches: kernels not profiled") for line in report.unmeasured)
    assert found.share == pytest.approx(0.7) and found.severity == "high"
    assert found.evidence["device_busy"] == pytest.approx(0.3)
    assert found.evidence["kernel_launches_per_step"] == pytest.approx(500)
    assert found.evidence["idle_us_per_launch"] == pytest.approx(0.07 / 500 * 1e6)
    assert "reduce-overhead" in found.snippet


def test_idle_device_explained_by_input_is_not_launch_overhead():
    report = diagnose(steps(20, compute=0.03, wait=0.06), host(), GPU)
    assert "launch_overhead" not in by_kind(report) and report.verdict.primary == "input_bound"


def test_sync_stall_share_and_per_step_count():
    found = by_kind(diagnose(steps(20, compute=0.06, syncs=2, sync=0.02), host(), GPU))["sync_stall"]
    assert found.share == pytest.approx(0.2) and found.severity == "high"
    assert found.evidence["syncs_per_step"] == pytest.approx(2.0)
    assert found.evidence["mean_sync_ms"] == pytest.approx(20.0)
    assert ".item()" in found.snippet


def test_sync_on_a_busy_gpu_costs_only_the_idle_share():
    found = by_kind(diagnose(steps(20, compute=0.097, syncs=1, sync=0.03), host(), GPU))["sync_stall"]
    assert found.evidence["sync_share"] == pytest.approx(0.3)
    assert found.share == pytest.approx(0.03) and found.severity == "low"


def test_cheap_syncs_on_the_cpu_are_not_reported():
    assert "sync_stall" not in by_kind(diagnose(steps(20, syncs=1, sync=0.0001), host(), CPU))


def test_small_batch_on_an_underfilled_gpu():
    found = by_kind(diagnose(steps(20, compute=0.03, batch=8), host(), {**GPU, "batch_size": 8}))["small_batch"]
    assert found.severity == "medium" and found.share == pytest.approx(0.7)
    assert found.evidence["batch_size"] == 8 and "batch_size=32" in found.snippet


def test_large_batch_is_not_small_and_cpu_short_step_is_low():
    assert "small_batch" not in by_kind(diagnose(steps(20, compute=0.03), host(), GPU))
    report = diagnose(steps(20, wall=0.002), host(), {**CPU, "batch_size": 4})
    found = by_kind(report)["small_batch"]
    assert (found.severity, found.share, found.confidence) == ("low", 0.0, "low")
    assert any("small_batch on the CPU" in line for line in report.unmeasured)


def test_float64_is_high_precision_finding():
    report = diagnose(steps(20, wait=0.01, float64=12), host(), CPU)
    found = by_kind(report)["precision"]
    assert found.severity == "high" and found.share == pytest.approx(0.9)  # the 0.09 s of 0.1 the dtype governs
    assert found.evidence["float64_ops_per_step"] == pytest.approx(12.0)
    assert found.evidence["steps_with_float64"] == 20 and ".float()" in found.snippet


def test_fp32_on_gpu_without_autocast_is_medium():
    found = by_kind(diagnose(steps(20, compute=0.09), host(), {**GPU, "autocast_seen": False}))["precision"]
    assert found.severity == "medium" and found.share == pytest.approx(0.9) and "bfloat16" in found.snippet


def test_memory_pressure_peak_and_retries():
    near = by_kind(diagnose(steps(20, compute=0.09), host(), {**GPU, "memory_peak_bytes": 76 * 2**30}))
    assert near["memory_pressure"].severity == "low"
    assert near["memory_pressure"].evidence["peak_fraction"] == pytest.approx(0.95)
    retried = by_kind(diagnose(steps(20, compute=0.09), host(), {**GPU, "allocator_retries": 3}))
    assert retried["memory_pressure"].severity == "medium"
    assert retried["memory_pressure"].evidence["allocator_retries"] == 3


def periodic(count, period, extra, base=0.1):
    return [step(i, wall=base + (extra if i % period == period - 1 else 0.0)) for i in range(count)]


def test_periodic_stall_every_10_steps():
    report = diagnose(periodic(100, 10, 0.2), host(), CPU)
    found = by_kind(report)["periodic_stall"]
    assert found.evidence["period_steps"] == 10 and found.evidence["stalls"] == 10
    assert found.evidence["extra_ms_per_stall"] == pytest.approx(200.0)
    assert found.evidence["typical_step_ms"] == pytest.approx(100.0)
    assert found.share == pytest.approx(2.0 / 12.0) and found.severity == "medium"
    assert found.confidence == "high" and "% 10" in found.snippet


def test_frequent_stalls_do_not_hide_in_their_own_sigma():
    found = by_kind(diagnose(periodic(100, 5, 0.2), host(), CPU))["periodic_stall"]
    assert found.evidence["period_steps"] == 5 and found.evidence["stalls"] == 20


def test_a_single_outlier_is_not_periodic():
    records = steps(100)
    records[37] = step(37, wall=0.5)
    assert "periodic_stall" not in by_kind(diagnose(records, host(), CPU))


def test_two_stray_outliers_off_their_beat_are_not_periodic():
    walls = [0.1] * 200
    walls[13] = walls[58] = 0.4
    flagged, _ = slow_outliers(walls)
    assert flagged == {13, 58}
    assert stall_period([13, 58], list(range(200))) is None  # the beat 13, 58, 103, 148, 193 has 2 of 5


def test_noisy_steps_have_no_stalls():
    rng = random.Random(0)
    records = [step(i, wall=0.1 + rng.gauss(0.0, 0.002)) for i in range(300)]
    report = diagnose(records, host(), CPU)
    assert "periodic_stall" not in by_kind(report) and serious(report) == []


def test_communication_and_straggler_only_with_ranks():
    alone = diagnose(steps(20), host(), CPU)
    assert not {"communication", "straggler"} & set(by_kind(alone))
    assert not any("rank" in line or "communication" in line for line in alone.unmeasured)
    unmeasured = diagnose(steps(20), host(), {**CPU, "world_size": 2}).unmeasured
    assert any("communication" in line for line in unmeasured) and any("per-rank" in line for line in unmeasured)
    context = {**CPU, "world_size": 4, "rank_step_times": [0.1, 0.1, 0.13, 0.1], "communication_wait_s": 0.4}
    found = by_kind(diagnose(steps(20), host(), context))
    assert found["communication"].share == pytest.approx(0.2) and found["communication"].severity == "high"
    assert found["straggler"].evidence["slowest_rank"] == 2
    assert found["straggler"].share == pytest.approx(0.03 / 0.13)
    assert found["straggler"].evidence["slowdown"] == pytest.approx(1.3)


def test_loader_and_model_throughput_formulas():
    synchronous = diagnose(steps(20, wait=0.05, batch=32), host(), {**CPU, "batch_size": 32})
    assert synchronous.loader_samples_per_s == pytest.approx(32 / 0.05)  # workers=0: the wait is the loader
    assert synchronous.model_samples_per_s == pytest.approx(32 / 0.05)  # wall - wait
    background = diagnose(steps(20, wait=0.05, batch=32), host(), {**CPU, "batch_size": 32, "loader_workers": 4})
    assert background.loader_samples_per_s == pytest.approx(32 / 0.1)  # workers pace the steps


def test_report_json_has_the_documented_keys():
    report = diagnose(steps(20, wait=0.05, compute=0.04, syncs=1, sync=0.001), host(), GPU)
    document = json.loads(json.dumps(report.to_json()))
    # DESIGN.md documents verdict, findings, unmeasured; report.py adds the two throughputs, script_error and the
    # timeline (the watched steps and host samples the page draws)
    assert {"verdict", "findings", "unmeasured"} <= set(document)
    assert set(document) - {"verdict", "findings", "unmeasured"} == {"loader_samples_per_s", "model_samples_per_s",
                                                                      "script_error", "timeline"}
    assert len(document["timeline"]["steps"]) == 20 and document["timeline"]["steps"][0]["index"] == 0
    assert set(document["verdict"]) == {"primary", "device_busy", "data_wait", "steps", "device"}
    assert document["verdict"]["primary"] in KINDS and document["findings"]
    for finding in document["findings"]:
        assert set(finding) == {"kind", "severity", "share", "evidence", "fix", "snippet", "gain", "confidence"}
        assert finding["gain"] is None and finding["kind"] in KINDS
    assert isinstance(document["unmeasured"], list)


def test_unmeasured_is_copied_and_missing_context_is_named():
    report = diagnose(steps(20), [], {"unmeasured": ["GPU utilization: NVML not found"], "script_error": "boom"})
    assert report.unmeasured[0] == "GPU utilization: NVML not found"
    assert any(line.startswith("device:") for line in report.unmeasured)
    assert any(line.startswith("host CPU use:") for line in report.unmeasured)
    assert report.script_error == "boom" and report.verdict.device == "unknown"


def test_no_steps_or_unknown_keys_are_errors():
    with pytest.raises(ValueError, match="no training step"):
        diagnose([], host(), CPU)
    with pytest.raises(ValueError, match="unknown context keys"):
        diagnose(steps(5), host(), {**CPU, "devcie": "cpu"})


def test_a_tiny_regular_wobble_is_not_a_stall():
    # sigma of the rest is 0, so only STALL_MIN_EXCESS keeps a 0.1% wobble from being called a stall
    assert "periodic_stall" not in by_kind(diagnose(periodic(100, 10, 0.0001), host(), CPU))


def test_every_other_step_slower_is_a_rhythm_not_a_stall():
    report = diagnose(periodic(100, 2, 0.02), host(), CPU)
    assert "periodic_stall" not in by_kind(report) and report.verdict.primary == "compute_bound"


def test_a_subject_the_instrumentation_already_explained_is_not_repeated():
    context = {**GPU, "unmeasured": ["operators and kernel launches: not profiled (profile_steps=0)"]}
    report = diagnose(steps(20, compute=0.03), host(), context)
    launches = [line for line in report.unmeasured if line.startswith("operators and kernel launches")]
    assert launches == ["operators and kernel launches: not profiled (profile_steps=0)"]


# --- launch_overhead from the profiled window (launch.py) ---------------------------------------------------


def test_many_small_operators_on_the_cpu_are_launch_overhead():
    report = diagnose(steps(20, wall=0.004, batch=4), host(), {**CPU, "batch_size": 4, "profile": profiled()})
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
    context = {**CPU, "profile": profiled(operators=operators, outside=outside)}
    found = by_kind(diagnose(steps(20), host(), context)).get("launch_overhead")
    assert (found.severity if found else None) == expected


def test_a_cpu_loop_with_few_profiled_steps_agreeing_has_lower_confidence():
    context = {**CPU, "profile": profiled(steps=2)}
    assert by_kind(diagnose(steps(20), host(), context))["launch_overhead"].confidence == "medium"


def test_a_cpu_loop_without_a_profile_is_not_judged_on_launches():
    report = diagnose(steps(20), host(), CPU)
    assert "launch_overhead" not in by_kind(report)
    assert any(line.startswith("operators and kernel launches: not profiled") for line in report.unmeasured)


def test_kernels_with_gaps_between_them_are_launch_overhead_on_a_gpu():
    # the CUDA-event span says busy 95%; the profiled kernels cover 0.2 of a 0.15 s profiled step = 30 ms per
    # step, 0.3 of the 0.1 s watched step: 70% idle, 70 us per launch for 1000 short kernels
    context = {**GPU, "profile": profiled(wall=0.15, kernels=1000, short=900, kernel_s=0.025, busy=0.2)}
    report = diagnose(steps(20, compute=0.095), host(), context)
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
    report = diagnose(steps(20, compute=0.095), host(), {**GPU, "profile": profiled(**fields)})
    assert "launch_overhead" not in by_kind(report)


def test_an_input_bound_gpu_is_not_launch_overhead():
    context = {**GPU, "profile": profiled(wall=0.15, kernels=1000, short=900, kernel_s=0.025, busy=0.2)}
    report = diagnose(steps(20, compute=0.095, wait=0.06), host(), context)
    assert "launch_overhead" not in by_kind(report) and report.verdict.primary == "input_bound"


# --- host RAM in memory_pressure ----------------------------------------------------------------------------


def test_host_ram_at_90_percent_is_memory_pressure_with_its_evidence():
    report = diagnose(steps(20), host(ram=0.95), CPU)
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
    assert "memory_pressure" not in by_kind(diagnose(steps(20), host(ram=0.89), CPU))
    report = diagnose(steps(20), host(), CPU)
    assert "memory_pressure" not in by_kind(report)
    assert "host RAM: no background sample read it" in report.unmeasured


def test_the_fullest_sample_counts_and_device_and_host_evidence_combine():
    samples = host(ram=0.5) + host(ram=0.93, count=2)
    context = {**GPU, "memory_peak_bytes": 76 * 2**30}
    found = by_kind(diagnose(steps(20, compute=0.09), samples, context))["memory_pressure"]
    assert found.evidence["host_ram_used_fraction"] == pytest.approx(0.93, abs=1e-9)
    assert (found.evidence["host_samples"], found.evidence["host_samples_full"]) == (12, 2)
    assert found.evidence["peak_fraction"] == pytest.approx(0.95)
    assert "Device memory" in found.fix and "Host RAM" in found.fix


def test_a_sync_costs_the_idle_share_the_profiled_kernels_leave():
    # the event span reads 97% busy, so a 30% sync share would cost 3%; the kernels cover 0.06 s of the 0.1 s step
    context = {**GPU, "profile": profiled(wall=0.15, kernels=100, short=10, kernel_s=0.06, busy=0.4)}
    found = by_kind(diagnose(steps(20, compute=0.097, syncs=1, sync=0.03), host(), context))["sync_stall"]
    assert found.evidence["device_busy"] == pytest.approx(0.6) and found.share == pytest.approx(0.3)


def with_sm(samples, sm):
    return [dataclasses.replace(sample, sm_activity_percent=sm, tensor_activity_percent=sm / 2) for sample in samples]


def test_busy_kernels_that_occupy_few_sms_are_an_underfilled_device():
    # kernels run 95% of every 100 ms step (healthy by the event span) but GPM says 30% of the SMs were active
    report = diagnose(steps(20, compute=0.095, batch=256), with_sm(host(gpu=100.0), 30.0), GPU)
    found = by_kind(report)["small_batch"]
    assert found.share == pytest.approx(0.95 * 0.70)  # busy x idle SM share: 0.665, by hand
    assert found.severity == "high" and found.confidence == "medium"  # 10 supporting samples
    assert found.evidence["sm_activity_percent"] == pytest.approx(30.0)
    assert found.evidence["nvml_utilization_percent"] == pytest.approx(100.0)
    assert "30% of the SMs" in found.fix
    assert report.verdict.primary == "small_batch"


def test_sm_activity_at_or_above_half_keeps_a_busy_device_healthy():
    report = diagnose(steps(20, compute=0.095, batch=256), with_sm(host(gpu=100.0), 50.0), GPU)
    assert "small_batch" not in by_kind(report) and report.verdict.primary == "compute_bound"
    assert by_kind(report)["compute_bound"].evidence["sm_activity_percent"] == pytest.approx(50.0)
    # without GPM readings nothing is claimed about SMs
    report = diagnose(steps(20, compute=0.095, batch=256), host(gpu=100.0), GPU)
    assert "small_batch" not in by_kind(report)
    assert by_kind(report)["compute_bound"].evidence["sm_activity_percent"] is None
