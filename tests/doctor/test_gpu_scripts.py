"""`gpufeed doctor` on the GPU bottleneck scripts (tests/doctor/scripts/gpu_*.py): the primary verdict and the key
findings for each. They need a CUDA GPU and skip without one.

What each can promise follows rules.py, launch.py and evidence.py:
- gpu_item_sync: one `.item()` a step, counted by the `Tensor.item` patch (hooks.py), puts a sync_stall finding in
  the report whenever a step on the GPU has at least one sync; its share is the device's idle share (at most), so
  it leads only where that idle time is measured (the profiled kernel busy time, not the CUDA-event span).
- gpu_pageable_copy: every copy (`Tensor.to` on a CPU tensor that is not pinned) is pageable, so the share of
  pageable bytes is exactly 1 and the bytes per step are the batch's; the copy is most of the step.
- gpu_tiny_kernels: launch_overhead needs the device busy below 50% (LOW_DEVICE_BUSY); when the busy share reads
  50% or more (the CUDA-event span counts the gaps between kernels as busy), no finding leads and the verdict is
  compute_bound. Either way nothing here waits for input, copies or syncs.
- gpu_cpu_augment: the batch is built inside the loader's `__next__` (num_workers=0), so the wait is most of the
  step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpufeed.cli.main import main

SCRIPTS = Path(__file__).parent / "scripts"

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU scripts need a CUDA GPU")


def doctor(tmp_path: Path, name: str, steps: int = 20, warmup: int = 5) -> dict:
    """The doctor's JSON report on `name`, run through the command line as a user would."""
    target = tmp_path / f"{name}.json"
    status = main(["doctor", "--steps", str(steps), "--warmup", str(warmup), "--timeout", "60", "--json",
                   str(target), str(SCRIPTS / f"{name}.py")])
    document = json.loads(target.read_text())
    assert status == 0, document["unmeasured"]
    assert document["verdict"]["steps"] == steps and document["verdict"]["device"].startswith("cuda")
    assert len(document["timeline"]["steps"]) == steps
    return document


def summary(document: dict) -> str:
    """The verdict and the findings in one line, for assertion messages."""
    findings = ", ".join(f"{f['kind']} {f['severity']} {f['share']:.2f}" for f in document["findings"])
    return f"{document['verdict']} | {findings}"


def the_finding(document: dict, kind: str) -> dict:
    found = [finding for finding in document["findings"] if finding["kind"] == kind]
    assert len(found) == 1, summary(document)
    return found[0]


def serious(document: dict) -> set[str]:
    return {finding["kind"] for finding in document["findings"] if finding["severity"] in ("high", "medium")}


def test_a_per_step_item_is_a_sync_stall(tmp_path: Path) -> None:
    document = doctor(tmp_path, "gpu_item_sync")
    steps = document["timeline"]["steps"]
    assert all(step["sync_count"] >= 1 for step in steps)  # the .item() in the print, once a step
    assert all(step["copy_bytes"] == 0 and step["data_wait_s"] == 0.0 for step in steps)  # data on the GPU
    sync = the_finding(document, "sync_stall")
    assert sync["evidence"]["syncs_per_step"] >= 1 and sum(step["sync_count"] for step in steps) >= len(steps)
    assert sync["evidence"]["mean_sync_ms"] > 0
    assert document["verdict"]["primary"] == "sync_stall", summary(document)
    assert not serious(document) & {"input_bound", "host_to_device", "precision"}, summary(document)


def test_pageable_float32_copies_are_host_to_device(tmp_path: Path) -> None:
    document = doctor(tmp_path, "gpu_pageable_copy")
    steps = document["timeline"]["steps"]
    batch_bytes = 64 * 3 * 256 * 256 * 4 + 64 * 8  # the float32 images and the int64 labels of one batch
    assert all(step["copy_bytes"] == batch_bytes == step["copy_pageable_bytes"] for step in steps)
    copy = the_finding(document, "host_to_device")
    assert copy["evidence"]["pageable_fraction"] == 1.0 and copy["evidence"]["pin_memory"] is False
    assert copy["severity"] == "high", summary(document)
    assert document["verdict"]["primary"] == "host_to_device", summary(document)
    assert "input_bound" not in serious(document), summary(document)


def test_many_tiny_kernels_are_launch_overhead_or_an_undiagnosed_busy_device(tmp_path: Path) -> None:
    document = doctor(tmp_path, "gpu_tiny_kernels")
    steps = document["timeline"]["steps"]
    assert all(step["copy_bytes"] == 0 and step["data_wait_s"] == 0.0 for step in steps)
    assert not serious(document) & {"input_bound", "host_to_device", "sync_stall", "precision"}, summary(document)
    primary = document["verdict"]["primary"]
    assert primary in ("launch_overhead", "compute_bound"), summary(document)
    if primary == "launch_overhead":
        launch = the_finding(document, "launch_overhead")
        assert launch["evidence"]["device_busy"] < 0.5 and launch["severity"] in ("high", "medium")
    else:  # below 50% busy with no input wait or sync, launch_overhead (or small_batch) would have led
        assert document["verdict"]["device_busy"] >= 0.5, summary(document)


def test_per_sample_cpu_augmentation_is_input_bound(tmp_path: Path) -> None:
    document = doctor(tmp_path, "gpu_cpu_augment", steps=10, warmup=2)
    assert document["verdict"]["primary"] == "input_bound", summary(document)
    waiting = the_finding(document, "input_bound")
    assert waiting["severity"] == "high" and waiting["evidence"]["loader_workers"] == 0
    assert document["verdict"]["data_wait"] > 0.5, summary(document)  # tens of ms of augmentation, ~1 ms of model
    assert all(step["batch_size"] == 64 for step in document["timeline"]["steps"])
