"""The findings on hand-built step sequences: each kind fires where it should, with evidence equal to hand
arithmetic, and healthy sequences raise no alarm. The findings from the readings beside the steps (the profiled
window, host RAM, GPM) are in test_readings.py."""

import dataclasses
import json
import random

import pytest
from observations import by_kind, host, observation, on_cpu, on_gpu, periodic, serious, step, steps

from gpufeed.doctor.findings import KINDS
from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.stalls import slow_outliers, stall_period
from gpufeed.doctor.observation import MemoryReading, OperatorFlops, Ranks, StepArithmetic


def test_input_bound_half_the_step_waiting_is_high():
    report = diagnose(on_cpu(steps(20, wait=0.05), host(), cpu_count=16, workers=2))
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
    report = diagnose(on_cpu(steps(40, wait=wait_s), host()))
    found = by_kind(report).get("input_bound")
    assert (found.severity if found else None) == expected
    if found:
        assert found.share == pytest.approx(wait_s / 0.1)


def test_suggested_workers_follow_the_cores_below_eight():
    found = by_kind(diagnose(on_cpu(steps(20, wait=0.03), host(), cpu_count=4)))["input_bound"]
    assert found.evidence["suggested_workers"] == 4 and "num_workers=4" in found.snippet


def test_healthy_cpu_steps_are_compute_bound_without_alarms():
    report = diagnose(on_cpu(steps(50, batch=64), host(cpu=60.0)))
    assert report.verdict.primary == "compute_bound" and serious(report) == []
    healthy = by_kind(report)["compute_bound"]
    assert healthy.severity == "info" and healthy.share == pytest.approx(1.0)
    assert report.model_samples_per_s == pytest.approx(640.0)  # 64 samples / 0.1 s
    assert report.loader_samples_per_s is None  # the loader keeps up: its rate is not seen


def test_healthy_gpu_steps_are_compute_bound_without_alarms():
    report = diagnose(on_gpu(steps(50, compute=0.095, batch=256), host(cpu=30.0, gpu=98.0)))
    assert report.verdict.primary == "compute_bound" and serious(report) == []
    assert report.verdict.device_busy == pytest.approx(0.95)
    assert by_kind(report)["compute_bound"].share == pytest.approx(0.95)


def test_cpu_oversubscribed_threads_and_workers():
    seen = on_cpu(steps(20), host(cpu=95.0, count=30), threads=8, workers=4, cpu_count=8)
    found = by_kind(diagnose(seen))["cpu_saturated"]
    assert found.share == pytest.approx(1 - 8 / 12) and found.severity == "high"
    assert found.evidence["cpu_percent"] == pytest.approx(95.0)
    assert (found.evidence["threads"], found.evidence["loader_workers"], found.evidence["cpu_count"]) == (8, 4, 8)
    assert found.confidence == "high"  # 30 samples above 90%
    assert "torch.set_num_threads(4)" in found.snippet  # 8 cores - 4 workers


def test_busy_cpu_with_matching_threads_is_not_saturation():
    report = diagnose(on_cpu(steps(20), host(cpu=99.0), threads=8, workers=0, cpu_count=8))
    assert "cpu_saturated" not in by_kind(report)


def test_cpu_bottleneck_on_gpu_when_device_idles():
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.005), host(cpu=97.0))))["cpu_saturated"]
    assert found.share == pytest.approx(0.95) and found.evidence["device_busy"] == pytest.approx(0.05)


def test_host_to_device_copy_share():
    records = steps(20, compute=0.08, copy=0.02, copy_bytes=2**20 * 64)
    found = by_kind(diagnose(on_gpu(records, host())))["host_to_device"]
    assert found.share == pytest.approx(0.2) and found.severity == "high"
    assert found.evidence["mean_copy_ms"] == pytest.approx(20.0)
    assert found.evidence["copy_mib_per_step"] == pytest.approx(64.0)
    assert found.evidence["copy_gb_per_s"] == pytest.approx(2**26 / 0.02 / 1e9)
    assert found.evidence["pageable_fraction"] == 0.0


def test_pageable_copies_flag_with_low_severity_when_cheap():
    records = steps(20, compute=0.095, copy=0.001, copy_bytes=1000, pageable=800)
    found = by_kind(diagnose(on_gpu(records, host())))["host_to_device"]
    assert found.severity == "low" and found.evidence["pageable_fraction"] == pytest.approx(0.8)
    assert "pin_memory=True" in found.snippet and "non_blocking=True" in found.snippet


def test_no_copy_finding_on_the_cpu():
    assert "host_to_device" not in by_kind(diagnose(on_cpu(steps(20, copy=0.05, copy_bytes=10**6), host())))


def test_launch_overhead_from_the_event_span_when_kernels_were_not_profiled():
    report = diagnose(on_gpu(steps(20, compute=0.03), host()))
    found = by_kind(report)["launch_overhead"]
    assert any(line.startswith("operators and kernel launches: kernels not profiled") for line in report.unmeasured)
    assert found.share == pytest.approx(0.7) and found.severity == "high"
    assert found.evidence["device_busy"] == pytest.approx(0.3)
    # without the profile no kernel is counted, so the per-launch figures are NA
    assert found.evidence["kernel_launches_per_step"] is None and found.evidence["idle_us_per_launch"] is None
    assert "reduce-overhead" in found.snippet


def test_idle_device_explained_by_input_is_not_launch_overhead():
    report = diagnose(on_gpu(steps(20, compute=0.03, wait=0.06), host()))
    assert "launch_overhead" not in by_kind(report) and report.verdict.primary == "input_bound"


def test_sync_stall_share_and_per_step_count():
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.06, syncs=2, sync=0.02), host())))["sync_stall"]
    assert found.share == pytest.approx(0.2) and found.severity == "high"
    assert found.evidence["syncs_per_step"] == pytest.approx(2.0)
    assert found.evidence["mean_sync_ms"] == pytest.approx(20.0)
    assert ".item()" in found.snippet


def test_sync_on_a_busy_gpu_costs_only_the_idle_share():
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.097, syncs=1, sync=0.03), host())))["sync_stall"]
    assert found.evidence["sync_share"] == pytest.approx(0.3)
    assert found.share == pytest.approx(0.03) and found.severity == "low"


def test_cheap_syncs_on_the_cpu_are_not_reported():
    assert "sync_stall" not in by_kind(diagnose(on_cpu(steps(20, syncs=1, sync=0.0001), host())))


def test_small_batch_on_an_underfilled_gpu():
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.03, batch=8), host(), batch_size=8)))["small_batch"]
    assert found.severity == "medium" and found.share == pytest.approx(0.7)
    assert found.evidence["batch_size"] == 8 and "batch_size=32" in found.snippet


def test_large_batch_is_not_small_and_cpu_short_step_is_low():
    assert "small_batch" not in by_kind(diagnose(on_gpu(steps(20, compute=0.03), host())))
    report = diagnose(on_cpu(steps(20, wall=0.002), host(), batch_size=4))
    found = by_kind(report)["small_batch"]
    assert (found.severity, found.share, found.confidence) == ("low", 0.0, "low")
    assert any("small_batch on the CPU" in line for line in report.unmeasured)


def test_float64_is_high_precision_finding():
    # a warm-up step counted 3e8 fp64 FLOPs of its 4e8 (flops.py): the evidence reads the count, not a flag
    counted = StepArithmetic(4 * 10**8, (OperatorFlops("aten.mm", "fp64", None, 3 * 10**8),
                                         OperatorFlops("aten.mm", "fp32", None, 10**8)), "fp64", 1e11, "test", None)
    report = diagnose(on_cpu(steps(20, wait=0.01), host(), arithmetic=counted))
    found = by_kind(report)["precision"]
    assert found.severity == "high" and found.share == pytest.approx(0.9)  # the 0.09 s of 0.1 the dtype governs
    assert found.evidence["fp64_flops_per_step"] == 3 * 10**8
    assert found.evidence["fp64_flop_fraction"] == pytest.approx(0.75) and ".float()" in found.snippet
    assert found.evidence["float64_tensor_seen"] is False
    # without the count, the float64 tensor seen alone makes it, and the evidence says the FLOPs were not counted
    flagged = by_kind(diagnose(on_cpu(steps(20, wait=0.01), host(), float64_seen=True)))["precision"]
    assert flagged.evidence["fp64_flops_per_step"] is None and flagged.confidence == "medium"


def test_fp32_on_gpu_without_autocast_is_medium():
    found = by_kind(diagnose(on_gpu(steps(20, compute=0.09), host(), autocast_seen=False)))["precision"]
    assert found.severity == "medium" and found.share == pytest.approx(0.9) and "bfloat16" in found.snippet


def test_memory_pressure_peak_and_retries():
    near = by_kind(diagnose(on_gpu(steps(20, compute=0.09), host(), memory=MemoryReading(76 * 2**30, 80 * 2**30, 0))))
    assert near["memory_pressure"].severity == "low"
    assert near["memory_pressure"].evidence["peak_fraction"] == pytest.approx(0.95)
    retries = MemoryReading(40 * 2**30, 80 * 2**30, 3)
    retried = by_kind(diagnose(on_gpu(steps(20, compute=0.09), host(), memory=retries)))
    assert retried["memory_pressure"].severity == "medium"
    assert retried["memory_pressure"].evidence["allocator_retries"] == 3


def test_periodic_stall_every_10_steps():
    report = diagnose(on_cpu(periodic(100, 10, 0.2), host()))
    found = by_kind(report)["periodic_stall"]
    assert found.evidence["period_steps"] == 10 and found.evidence["stalls"] == 10
    assert found.evidence["extra_ms_per_stall"] == pytest.approx(200.0)
    assert found.evidence["typical_step_ms"] == pytest.approx(100.0)
    assert found.share == pytest.approx(2.0 / 12.0) and found.severity == "medium"
    assert found.confidence == "high" and "% 10" in found.snippet


def test_stalls_that_are_the_threads_wait_for_a_core_are_not_the_scripts():
    """Every 5th step 0.2 s slower: a stall of the script's own when its thread ran through it; none when the
    thread waited those 0.2 s for a core (run_delay_s: the scheduler's slices on a busy host), and a note says what
    was left out: 20 x 0.2 s of 100 x 0.1 + 20 x 0.2 s, 29%."""
    records = periodic(100, 5, 0.2)
    assert by_kind(diagnose(on_cpu(records, host())))["periodic_stall"].evidence["period_steps"] == 5
    waited = [dataclasses.replace(r, run_delay_s=r.wall_s - 0.1) for r in records]
    report = diagnose(on_cpu(waited, host()))
    assert "periodic_stall" not in by_kind(report)
    assert "periodic stalls: judged on each step's time less its wait for a core, 29% of the watched time" in \
        " ".join(report.unmeasured)
    # a checkpoint's 0.2 s on the beat beside a wait of 0.05 s on every step: the stall remains, at its own size
    both = [dataclasses.replace(r, wall_s=r.wall_s + 0.05, run_delay_s=0.05) for r in records]
    found = by_kind(diagnose(on_cpu(both, host())))["periodic_stall"]
    assert found.evidence["extra_ms_per_stall"] == pytest.approx(200.0)
    assert found.evidence["typical_step_ms"] == pytest.approx(100.0)


def test_frequent_stalls_do_not_hide_in_their_own_sigma():
    found = by_kind(diagnose(on_cpu(periodic(100, 5, 0.2), host())))["periodic_stall"]
    assert found.evidence["period_steps"] == 5 and found.evidence["stalls"] == 20


def test_a_single_outlier_is_not_periodic():
    records = steps(100)
    records[37] = step(37, wall=0.5)
    assert "periodic_stall" not in by_kind(diagnose(on_cpu(records, host())))


def test_two_stray_outliers_off_their_beat_are_not_periodic():
    walls = [0.1] * 200
    walls[13] = walls[58] = 0.4
    flagged, _ = slow_outliers(walls)
    assert flagged == {13, 58}
    assert stall_period([13, 58], list(range(200))) is None  # the beat 13, 58, 103, 148, 193 has 2 of 5


def test_noisy_steps_have_no_stalls():
    rng = random.Random(0)
    records = [step(i, wall=0.1 + rng.gauss(0.0, 0.002)) for i in range(300)]
    report = diagnose(on_cpu(records, host()))
    assert "periodic_stall" not in by_kind(report) and serious(report) == []


def test_communication_and_straggler_only_with_ranks():
    """One process: neither is judged nor noted; ranks without gathered steps: both say so (the rules on
    gathered ranks are in test_ranks.py)."""
    alone = diagnose(on_cpu(steps(20), host()))
    assert not {"communication", "straggler"} & set(by_kind(alone))
    assert not any("rank" in line or "communication" in line for line in alone.unmeasured)
    unmeasured = diagnose(on_cpu(steps(20), host(), ranks=Ranks(world_size=2))).unmeasured
    assert any("communication" in line for line in unmeasured) and any("per-rank" in line for line in unmeasured)


def test_loader_and_model_throughput_formulas():
    synchronous = diagnose(on_cpu(steps(20, wait=0.05, batch=32), host(), batch_size=32))
    assert synchronous.loader_samples_per_s == pytest.approx(32 / 0.05)  # workers=0: the wait is the loader
    assert synchronous.model_samples_per_s == pytest.approx(32 / 0.05)  # wall - wait
    background = diagnose(on_cpu(steps(20, wait=0.05, batch=32), host(), batch_size=32, workers=4))
    assert background.loader_samples_per_s == pytest.approx(32 / 0.1)  # workers pace the steps


def test_report_json_has_the_documented_keys():
    report = diagnose(on_gpu(steps(20, wait=0.05, compute=0.04, syncs=1, sync=0.001), host()))
    document = json.loads(json.dumps(report.to_json()))
    # DESIGN.md documents verdict, findings, unmeasured; report.py adds the notes about the run, the two
    # throughputs (and the token rates and MFU), script_error and the timeline (the watched steps and host samples
    # the page draws)
    assert {"verdict", "findings", "unmeasured"} <= set(document)
    assert set(document) - {"verdict", "findings", "unmeasured"} == {
        "notes", "loader_samples_per_s", "model_samples_per_s", "script_error", "timeline", "ranks", "loader_workers",
        "model_tokens_per_s", "real_tokens_per_s", "mfu", "mfu_peak_flops_per_s", "mfu_precision", "flops_per_token",
        "rule_flops_per_token", "flops_rule", "mfu_missing"}
    assert document["model_tokens_per_s"] is None and document["mfu"] is None  # these steps carried no token ids
    assert len(document["timeline"]["steps"]) == 20 and document["timeline"]["steps"][0]["index"] == 0
    assert set(document["verdict"]) == {"primary", "device_busy", "data_wait", "steps", "device", "world_size",
                                        "share", "tied_with"}
    assert document["verdict"]["primary"] in KINDS and document["findings"]
    for finding in document["findings"]:
        assert set(finding) == {"kind", "severity", "share", "evidence", "fix", "snippet", "gain", "confidence"}
        assert finding["gain"] is None and finding["kind"] in KINDS
    assert isinstance(document["unmeasured"], list)


def test_the_notes_are_copied_and_an_unknown_device_is_named():
    seen = observation(steps(20), [], device=None, notes=("GPU utilization: NVML not found",), script_error="boom")
    report = diagnose(seen)
    assert report.unmeasured[0] == "GPU utilization: NVML not found"
    assert any(line.startswith("device:") for line in report.unmeasured)
    assert any(line.startswith("host CPU use:") for line in report.unmeasured)
    assert report.script_error == "boom" and report.verdict.device == "unknown"


def test_no_steps_or_a_misspelt_field_are_errors():
    with pytest.raises(ValueError, match="no training step"):
        diagnose(on_cpu([], host()))
    with pytest.raises(TypeError, match="devcie"):  # typed: a field nobody reads cannot be filled
        dataclasses.replace(on_cpu(steps(5), host()), devcie="cpu")


def test_a_tiny_regular_wobble_is_not_a_stall():
    # sigma of the rest is 0, so only STALL_MIN_EXCESS keeps a 0.1% wobble from being called a stall
    assert "periodic_stall" not in by_kind(diagnose(on_cpu(periodic(100, 10, 0.0001), host())))


def test_every_other_step_slower_is_a_rhythm_not_a_stall():
    report = diagnose(on_cpu(periodic(100, 2, 0.02), host()))
    assert "periodic_stall" not in by_kind(report) and report.verdict.primary == "compute_bound"


def test_a_subject_the_instrumentation_already_explained_is_not_repeated():
    seen = on_gpu(steps(20, compute=0.03), host(), notes=("operators and kernel launches: not profiled "
                                                          "(profile_steps=0)",))
    report = diagnose(seen)
    launches = [line for line in report.unmeasured if line.startswith("operators and kernel launches")]
    assert launches == ["operators and kernel launches: not profiled (profile_steps=0)"]
