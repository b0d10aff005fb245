"""One figure for "busy enough": the train verdict and the doctor's compute_bound agree at and around it."""

import pytest

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observation import Host, LoaderSettings, MemoryReading, Observation, Ranks, StepShape
from gpufeed.measure.steps import StepRecord
from gpufeed.measure.thresholds import DEVICE_BUSY_ENOUGH
from gpufeed.train.events import TrainResult, verdict


def train_verdict(busy: float, wait: float = 0.0) -> str:
    result = TrainResult(
        validation_accuracy=0.5, validation_loss=1.0, epochs=1, steps=10, steps_this_run=10, samples_per_s=1000.0,
        data_wait_fraction=wait, device_busy_fraction=busy, gpu_utilization_percent=None, peak_memory_bytes=0,
        device="cuda:0", precision="bf16", world_size=1, batch_size=256, effective_batch_size=256,
        learning_rate=0.1, seconds=1.0, model="cnn", parameters=1, resumed_from=None, out=None, config={},
        verdict="", unmeasured=[])
    return verdict(result)


def doctor_healthy(busy: float) -> bool:
    """Fifty 0.1 s GPU steps with `busy` of each on the device and no wait, copy or sync: compute_bound is the
    verdict either way (no waste is found), and its evidence says whether the device was busy enough (its fix then
    says how much of the step idled with no cause found)."""
    records = [StepRecord(index=i, start_s=0.1 * i, wall_s=0.1, data_wait_s=0.0, copy_s=0.0, copy_bytes=0,
                          copy_pageable_bytes=0, compute_s=busy * 0.1, sync_count=0, sync_s=0.0,
                          batch_size=256) for i in range(50)]
    seen = Observation(tuple(records), (), "cuda:0", Host(16, 8), LoaderSettings(8, True, 0.0),
                       MemoryReading(None, None, None), None, StepShape(256, 1, 256), False, True, Ranks(), (), None)
    report = diagnose(seen)
    found = {finding.kind: finding for finding in report.findings}["compute_bound"]
    assert report.verdict.primary == "compute_bound"
    assert found.fix.startswith("The GPU computed") is not found.evidence["busy_enough"]
    return found.evidence["busy_enough"]


def test_the_shared_figure_is_eighty_percent():
    assert DEVICE_BUSY_ENOUGH == 0.8


@pytest.mark.parametrize("busy, enough", [(0.85, True), (0.81, True), (0.79, False), (0.5, False)])
def test_train_and_doctor_agree_on_busy_enough(busy, enough):
    assert ("the input pipeline keeps up" in train_verdict(busy)) is enough
    assert doctor_healthy(busy) is enough


def test_below_the_figure_the_train_verdict_names_the_data_wait():
    assert "input pipeline is the bottleneck" in train_verdict(0.79, wait=0.2)
