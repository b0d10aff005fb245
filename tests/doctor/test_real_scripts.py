"""`gpufeed doctor` on training scripts written as people write them (tests/doctor/scripts/real_*.py): argparse,
validation loaders, gradient accumulation, dict batches and model(**batch), bf16 autocast with checkpoints, an
endless itertools.cycle loop with spawn workers and sys.exit, an IterableDataset with two optimizers.

What is checked is what the scripts do, counted exactly (batch sizes, batches per optimizer step, the validation
batches left out, checkpoints written, optimizer steps, processes left behind), never how long anything took
beyond a wait being there at all.
The rules' side of each defect found with these scripts is checked on hand-made records at the end.
"""

from __future__ import annotations

import psutil
import pytest
import torch
from observations import observation
from test_inject import SCRIPTS, patched_state
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.findings.kinds import cpu_saturated, input_bound
from gpufeed.doctor.findings.stalls import stall_period
from gpufeed.doctor.observation import StepShape
from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.measure.steps import HostSample, StepRecord


@pytest.fixture(autouse=True)
def in_the_scripts_folder(monkeypatch: pytest.MonkeyPatch):
    """Run as `cd tests/doctor/scripts; gpufeed doctor real_x.py` would (on one thread: conftest.py)."""
    monkeypatch.chdir(SCRIPTS)


def doctor(script: str, *args: str, steps: int, warmup: int, timeout_s: float = 30.0):
    """Watch `steps` steps after `warmup`, with no profiled window (it adds steps, not counts)."""
    before = patched_state()
    watcher = Watcher(steps=steps, warmup=warmup, profile_steps=0)
    outcome = run_script(script, list(args), False, watcher, timeout_s=timeout_s)
    # nothing the doctor patched is left behind (the warning filters that the scripts' imports add stay: sympy's)
    assert {**patched_state(), "filters": None} == {**before, "filters": None}
    assert workers_alive() == []  # no DataLoader worker is left running
    return watcher, outcome


def workers_alive() -> list[psutil.Process]:
    """This process's children but multiprocessing's resource tracker (it serves the whole process)."""
    return [child for child in psutil.Process().children(recursive=True)
            if not any("resource_tracker" in part for part in child.cmdline())]


def test_a_cifar_script_counts_only_its_training_batches() -> None:
    # optimizer steps 1 (the start), 2-3 (warm-up), 4-11 (watched); validation after steps 4 and 8, 2 batches each
    watcher, outcome = doctor("real_cifar.py", "--val-every", "4", "--log-every", "2", steps=8, warmup=2)
    seen = watcher.observe()
    assert outcome.problem is None and watcher.source == "optimizer"
    assert [record.batch_size for record in watcher.records] == [64] * 8  # not 64 + 256 on a validation step
    assert watcher.contents.other_batches == 4
    assert seen.loader.workers == 2 and seen.loader.pin_memory is False  # not the validation loader's
    assert seen.shape == StepShape(64, 1, 64)
    # a map-style Dataset of (images, labels) batches, in the script's name: input_bound would advise packing it
    assert (seen.setup.packable, seen.setup.dataset_variable) == (True, "train_set")
    # about the run, not something missing
    assert any(note.kind == "run" and note.text.startswith("other DataLoaders: 4 batches") for note in seen.notes)


def test_gradient_accumulation_over_dict_like_batches() -> None:
    watcher, outcome = doctor("real_accumulate.py", steps=4, warmup=1)
    seen = watcher.observe()
    assert outcome.problem is None and watcher.source == "optimizer"
    # a step is one optimizer.step() over 4 UserDict batches of 8 (a Mapping, as transformers' BatchEncoding is)
    assert [record.batch_size for record in watcher.records] == [32] * 4
    assert seen.shape == StepShape(32, 4, 8)
    line = next(note.text for note in seen.notes if note.text.startswith("samples per step:"))
    assert "4 DataLoader batches of 8" in line and "the 32 samples" in line


def test_gradient_accumulation_without_a_loader_reads_model_keyword_inputs() -> None:
    # model(**batch): the rows come from keyword arguments; 4 forwards with grad make a step of 32 samples
    watcher, outcome = doctor("real_accumulate.py", "--no-loader", steps=4, warmup=1)
    seen = watcher.observe()
    assert outcome.problem is None and watcher.source == "optimizer"
    assert [record.batch_size for record in watcher.records] == [None] * 4 and seen.shape.batch_size == 32
    assert seen.shape.batches_per_step is None and watcher.forward_batch_size == 8
    assert any("the 32 rows that went through the model" in note.text for note in seen.notes)


def test_bf16_autocast_with_evaluation_and_checkpoints(tmp_path) -> None:
    # optimizer steps 1 (the start), 2 (warm-up), 3-8 (watched): the doctor stops the script inside step 8's
    # optimizer.step(), so checkpoints every 3 steps are written after steps 3 and 6 only
    watcher, outcome = doctor("real_bf16_checkpoint.py", "--save-every", "3", "--eval-every", "2", "--out",
                              str(tmp_path), steps=6, warmup=1)
    seen = watcher.observe()
    assert outcome.problem is None and watcher.source == "optimizer" and len(watcher.records) == 6
    assert sorted(path.name for path in tmp_path.iterdir()) == ["step00003.pt", "step00006.pt"]
    assert seen.autocast_seen is True
    assert seen.shape.batch_size == 256  # the training batch; the 512 held-out rows ran under no_grad


@pytest.mark.timing
@pytest.mark.slow
def test_an_endless_cycle_over_spawned_workers() -> None:
    # 256 samples make 16 batches; itertools.cycle replays them from then on without asking the loader. Record i
    # ends at optimizer step i + 4 (one start, 2 warm-up steps) and holds batch i + 4 (1-based). Two spawned
    # workers each import torch before the first batch: on a busy 2-core machine that took over 30 s once.
    watcher, outcome = doctor("real_cycle_spawn.py", "--max-steps", "1000", steps=16, warmup=2, timeout_s=120.0)
    records = watcher.records
    assert outcome.problem is None and watcher.loader_workers == 2  # spawned workers fed the loop
    assert [record.batch_size for record in records] == [16] * 13 + [None] * 3
    # batch 17 asked the loader once more: its StopIteration (stopping 2 spawned workers) is data wait
    assert records[13].data_wait_s > 0 and [record.data_wait_s for record in records[14:]] == [0.0] * 2
    assert watcher.observe().loader.restart_s > 0


def test_sys_exit_before_the_watch_is_complete_names_the_steps_it_timed() -> None:
    watcher, outcome = doctor("real_cycle_spawn.py", "--max-steps", "6", "--workers", "0", steps=20, warmup=2)
    assert outcome.exited_early and outcome.exit_status == 0 and outcome.error is None
    assert outcome.steps_seen == 5 and len(watcher.records) == 3  # 6 optimizer steps time 5 steps
    assert "ended after 5 timed steps" in outcome.problem and "6 optimizer steps" in outcome.problem
    assert "forward" not in outcome.problem  # the forward hooks stopped counting after the first step


@pytest.mark.parametrize("critic", [1, 3])
def test_two_optimizers_the_first_to_step_keeps_time(critic: int) -> None:
    # the discriminator steps on every batch and first: 7 of its steps (a start, 1 warm-up, 5 watched), the
    # doctor stopping the script in the 7th; the generator steps after every `critic`-th, 6 // critic times
    watcher, outcome = doctor("real_iterable_gan.py", "--critic", str(critic), steps=5, warmup=1)
    assert outcome.problem is None and watcher.seen["optimizers"] == 2
    assert watcher.seen["optimizer steps"] == 7 + 6 // critic
    assert [record.batch_size for record in watcher.records] == [128] * 5  # from the IterableDataset's worker
    assert any(note.text.startswith("step clock: 2 optimizers") for note in watcher.observe().notes)


def test_a_validation_forward_under_no_grad_is_not_a_step_of_the_forward_clock() -> None:
    torch.manual_seed(0)
    model, inputs, held_out = nn.Linear(4, 2), torch.randn(8, 4), torch.randn(16, 4)
    watcher = Watcher(steps=5, warmup=1, profile_steps=0)
    instrumentation = Instrumentation(watcher)
    instrumentation.install()
    try:
        for _ in range(8):  # no optimizer, no DataLoader: hand-written SGD, a validation forward after each step
            model.zero_grad()
            model(inputs).square().mean().backward()
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter -= 0.1 * parameter.grad
                model(held_out)
    finally:
        instrumentation.remove()
    # 8 training forwards: a start, a warm-up step and 5 watched (then done, the 8th is not counted)
    assert watcher.source == "forward" and watcher.steps_closed == 6
    assert [record.batch_size for record in watcher.records] == [8] * 5


def test_batches_are_told_apart_by_the_line_that_asks_for_them() -> None:
    # a labeled loader rebuilt on a new dataset every epoch and an unlabeled one, both read on every step
    # (semi-supervised), and a validation pass after every 3rd step: 2 batches of 6 under torch.no_grad()
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    held_out = DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=6)
    watcher = Watcher(steps=12, warmup=1, profile_steps=0)  # optimizer steps 1 (the start), 2, 3-14 (watched)
    instrumentation = Instrumentation(watcher)
    instrumentation.install()
    try:
        for step in range(16):
            if step % 4 == 0:  # a new epoch: new datasets, new loaders
                labeled = iter(DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=2))
                unlabeled = iter(DataLoader(TensorDataset(torch.randn(12, 4)), batch_size=3))
            (inputs,), (more,) = next(labeled), next(unlabeled)
            loss = model(inputs).square().mean() + model(more).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (step + 1) % 3 == 0:
                with torch.no_grad():
                    for (rows,) in held_out:
                        model(rows)
    finally:
        instrumentation.remove()
    assert watcher.source == "optimizer" and [record.batch_size for record in watcher.records] == [5] * 12
    assert watcher.contents.other_batches == 8  # after optimizer steps 3, 6, 9 and 12, before the watch ended
    seen = watcher.observe()
    assert seen.shape.batches_per_step == 2 and seen.shape.batch_size == 5
    assert any("the 5 samples of a step" in note.text for note in seen.notes)


# --- the rules' side, on hand-made records --------------------------------------------------------------------


def records(walls_ms: list[float], wait_ms: float = 0.0, batch: int | None = 64) -> list[StepRecord]:
    return [StepRecord(index=index, start_s=0.0, wall_s=wall / 1000, data_wait_s=wait_ms / 1000, copy_s=0.0,
                       copy_bytes=0, copy_pageable_bytes=0, sync_count=0, sync_s=0.0, batch_size=batch,
                       compute_s=None) for index, wall in enumerate(walls_ms)]


HOST = [HostSample(time_s=0.1 * index, cpu_percent=50.0, cpu_per_core_percent=(50.0, 50.0),
                   gpu_utilization_percent=None, gpu_memory_used_bytes=None) for index in range(10)]


def two_cores(steps: list[StepRecord], **changes):
    """A loaded 2-core VM's run on one torch thread, 2 loader workers, the batch size read from the records."""
    return observation(steps, HOST, **{"cpu_count": 2, "threads": 1, "workers": 2, "batch_size": None, **changes})


def test_a_validation_beat_is_found_between_noisy_steps() -> None:
    # real_cifar.py --val-every 6 on a loaded 2-core VM: validation after every 6th step (indices 2, 8, 14), and
    # two stray slow steps (9, 10) whose gaps of 1 hid the beat from the most common gap between slow steps
    walls = [39.8, 39.3, 103.0, 30.1, 34.1, 29.7, 34.0, 28.3, 102.5, 48.8, 45.1, 30.0, 37.7, 30.9, 93.1, 30.9, 37.7,
             33.4, 38.6, 34.6]
    assert stall_period([2, 8, 9, 10, 14], list(range(20))) == (6, [2, 8, 14])
    found = {f.kind: f for f in diagnose(two_cores(records(walls))).findings}["periodic_stall"]
    assert (found.evidence["period_steps"], found.evidence["stalls"]) == (6, 3)
    # another run: a stray slow step 17 (+10 ms against +88) fell on the beat of 3 and made it the one with the
    # most stalls; it is jitter beside the validation's stalls, and the beat of 6 is the one they fill
    walls = [46.9, 44.7, 137.1, 46.2, 42.6, 45.4, 51.8, 43.4, 127.6, 42.5, 43.8, 47.0, 39.9, 43.1, 130.6, 44.4,
             42.4, 53.6, 43.3, 43.0]
    assert stall_period([2, 8, 14, 17], list(range(20))) == (6, [2, 8, 14])
    found = {f.kind: f for f in diagnose(two_cores(records(walls))).findings}["periodic_stall"]
    assert (found.evidence["period_steps"], found.evidence["stalls"]) == (6, 3)


def test_stray_slow_steps_alone_make_no_beat() -> None:
    assert stall_period([3, 5], list(range(20))) is None  # gap 2: a rhythm, not a stall
    assert stall_period([2, 9, 13], list(range(20))) is None  # no beat holds all three, two of three is not enough
    # two slow steps 8 apart are a beat of 8 only if a third falls on it: alone, two stray steps of a loaded host
    assert stall_period([4, 12], list(range(20))) is None
    assert stall_period([4, 12, 20], list(range(24))) == (8, [4, 12, 20])
    report = diagnose(two_cores(records([30.0] * 20)))
    assert "periodic_stall" not in {f.kind for f in report.findings}
    assert any(line.startswith("periodic stalls: a beat longer than 9 steps") for line in report.unmeasured)


def test_small_batch_judges_the_accumulated_batch_not_the_step() -> None:
    seen = two_cores(records([20.0] * 20, batch=32), batches_per_step=4, loader_batch_size=8)
    found = {f.kind: f for f in diagnose(seen).findings}["small_batch"]
    assert found.evidence["batch_size"] == 8 and found.evidence["batches_per_step"] == 4
    assert found.evidence["model_step_ms"] == pytest.approx(5.0)  # 20 ms for 4 batches
    assert "accumulation_steps = 1  # was 4" in found.snippet and "batch_size=32" in found.snippet
    # without accumulation the step's 32 samples are not small
    assert "small_batch" not in {f.kind for f in diagnose(two_cores(records([20.0] * 20, batch=32))).findings}


def test_input_bound_fixes_do_not_ask_for_the_workers_the_loader_has() -> None:
    waiting = records([20.0] * 20, wait_ms=10.0)
    found = {f.kind: f for f in diagnose(two_cores(waiting)).findings}["input_bound"]
    assert found.evidence["suggested_workers"] == 2 and "num_workers=2" not in found.fix + found.snippet
    assert "already has 2 worker processes" in found.fix
    restarting = two_cores(waiting, restart_s=0.9 * 20 * 0.010)  # 90% of the wait: workers stopping and starting
    found = {f.kind: f for f in diagnose(restarting).findings}["input_bound"]
    assert found.evidence["restart_share_of_wait"] == pytest.approx(0.9)
    assert "90% of that wait" in found.fix and "persistent_workers=True" in found.snippet
    fewer = input_bound.fix(8, False, current=2)
    assert "num_workers=8" in fewer[0] and "num_workers=8" in fewer[1]


def test_cpu_saturated_suggests_workers_and_threads_that_add_up_to_the_cores() -> None:
    _, snippet = cpu_saturated.fix(2, 2, 2, on_gpu=False)
    assert "workers = 1 (was 2)" in snippet and "torch.set_num_threads(1)" in snippet
    _, snippet = cpu_saturated.fix(8, 2, 8, on_gpu=False)
    assert "workers = 2  #" in snippet and "torch.set_num_threads(6)" in snippet
