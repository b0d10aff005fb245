"""The Watcher's step clock and records, and `watch()` as a wrapper and as a context manager, on the CPU. Step times
are checked exactly on a fake clock (observations.fake_clock) where what is tested is their bookkeeping, and only
from below (sleeps only overrun) or against a gap an order of magnitude wider in the runs on the real clock."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import torch
from observations import fake_clock
from torch import nn
from torch.optim import optimizer as optim_module
from torch.utils.data import DataLoader, Dataset

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.notes import Note
from gpufeed.doctor.observe.clock import batch_size_of, counted_by
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.wrapper import watch

SCRIPTS = Path(__file__).parent / "scripts"


class SlowDataset(Dataset):
    """Sample i is the vector [i, i, i] and label i % 3; each takes `delay_s` to load."""

    def __init__(self, size: int = 96, delay_s: float = 0.002):
        self.size, self.delay_s = size, delay_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        time.sleep(self.delay_s)
        return torch.full((3,), float(index)), index % 3


class TickingDataset(SlowDataset):
    """SlowDataset whose samples each move a fake clock by `delay_s` instead of sleeping."""

    def __init__(self, clock, size: int, delay_s: float):
        super().__init__(size, delay_s)
        self.clock = clock

    def __getitem__(self, index: int):
        self.clock.advance(self.delay_s)
        return torch.full((3,), float(index)), index % 3


def train_step(model: nn.Module, optimizer, inputs, labels) -> None:
    loss = nn.functional.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_the_first_boundary_starts_and_warmup_is_discarded() -> None:
    watcher = Watcher(steps=3, warmup=2, profile_steps=0)
    for _ in range(5):  # a start, 2 warm-up steps, 2 watched
        watcher.step_boundary("manual")
    assert watcher.steps_closed == 4 and len(watcher.records) == 2 and not watcher.done
    watcher.step_boundary("manual")
    assert watcher.done and [r.index for r in watcher.records] == [0, 1, 2]
    assert not watcher.step_boundary("manual") and len(watcher.records) == 3  # done: nothing more


def test_a_better_clock_takes_over_and_a_worse_one_is_ignored() -> None:
    watcher = Watcher(steps=10, warmup=0)
    for _ in range(4):
        watcher.on_batch_wait(0.0, torch.zeros(5, 2))  # the loader's clock: a start and 3 steps
    assert watcher.source == "loader" and len(watcher.records) == 3
    assert watcher.step_boundary("optimizer")  # the optimizer's clock: counting restarts here
    assert watcher.source == "optimizer" and watcher.records == []
    watcher.on_batch_wait(0.25, torch.zeros(5, 2))
    assert not watcher.step_boundary("loader") and not watcher.step_boundary("forward")
    watcher.step_boundary("optimizer")
    (record,) = watcher.records
    assert record.data_wait_s == 0.25 and record.batch_size == 5


def test_events_land_in_the_step_they_happen_in() -> None:
    watcher = Watcher(steps=2, warmup=0)
    watcher.step_boundary()
    watcher.on_copy(0.5, 100, pinned=False)
    watcher.on_copy(0.25, 60, pinned=True)
    watcher.on_sync(0.125)
    watcher.on_sync(0.125)
    watcher.step_boundary()
    watcher.step_boundary()
    first, second = watcher.records
    assert (first.copy_s, first.copy_bytes, first.copy_pageable_bytes) == (0.75, 160, 100)
    assert (first.sync_count, first.sync_s) == (2, 0.25)
    assert (second.copy_bytes, second.sync_count, second.batch_size) == (0, 0, None)


def test_batch_size_of_common_batches() -> None:
    assert batch_size_of(torch.zeros(7, 3)) == 7
    assert batch_size_of((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_size_of({"image": torch.zeros(6, 3), "label": [0] * 6}) == 6
    assert batch_size_of([["a", "b", "c"], ["x", "y", "z"]]) == 3  # strings: the labels' length
    assert batch_size_of(torch.tensor(1.0)) is None and batch_size_of(object()) is None
    # an EmbeddingBag batch: 5,695 token ids flattened, 64 offsets, 64 labels: 64 samples, not 5,695
    text = (torch.zeros(5695, dtype=torch.long), torch.zeros(64, dtype=torch.long), torch.zeros(64))
    assert batch_size_of(text) == 64 and batch_size_of(text, 64) == 64
    # the DataLoader's batch_size counts, capped by the batch's largest leading dimension (an epoch's short end)
    assert batch_size_of((torch.zeros(40, 3), torch.zeros(40)), 64) == 40
    # and the report's note says which way the samples were counted
    assert counted_by(text, 64) == "the DataLoader's batch_size"
    assert counted_by(text, None) == "the leading dimension most of the batch's tensors agree on"
    assert counted_by([["a", "b"], ["x", "y"]], None) == "the length of its labels"


@pytest.mark.timing
def test_watch_wraps_a_loader_yields_the_same_batches_and_records_the_waits() -> None:
    torch.manual_seed(0)
    dataset = SlowDataset()
    loader = DataLoader(dataset, batch_size=4)
    expected = [batch for batch in DataLoader(dataset, batch_size=4)]
    model, seen = nn.Linear(3, 3), []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    watched = watch(loader, steps=10, warmup=2)
    hooks = len(optim_module._global_optimizer_post_hooks)
    for inputs, labels in watched:
        seen.append((inputs, labels))
        train_step(model, optimizer, inputs, labels)
    assert len(optim_module._global_optimizer_post_hooks) == hooks  # removed when the loop ended
    assert len(seen) == len(expected) == 24
    assert all(torch.equal(a, c) and torch.equal(b, d) for (a, b), (c, d) in zip(seen, expected, strict=True))
    records = watched.records
    assert len(records) == 10 and watched.watcher.source == "optimizer" and watched.watcher.loader_workers == 0
    assert all(record.batch_size == 4 and record.data_wait_s >= 4 * 0.002 for record in records)


def test_breaking_out_of_a_watched_loop_removes_the_hooks() -> None:
    hooks = len(optim_module._global_optimizer_post_hooks)
    for index, _ in enumerate(watch(range(100), steps=5, warmup=0)):
        assert len(optim_module._global_optimizer_post_hooks) == hooks + 1
        if index == 10:
            break
    assert len(optim_module._global_optimizer_post_hooks) == hooks


def test_watch_as_a_context_manager_with_explicit_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    watched = watch(steps=6, warmup=1, profile_steps=0)
    with watched as w:
        for step in range(12):
            clock.advance(0.0625 * (1 + step % 3))  # steps of 1, 2 and 3 sixteenths of a second in turn
            w.step()
    records = w.records
    assert len(records) == 6 and w.watcher.done and w.watcher.source == "manual"
    # w.step() 0 is the start, 1 the warm-up step's end: record i is the step that ends at w.step() 2 + i
    assert [record.wall_s for record in records] == [0.0625 * (1 + (2 + index) % 3) for index in range(6)]
    # each step starts where the one before ended, counted from the watch's start (the first two steps before)
    assert [record.start_s for record in records] == [0.0625 * (1 + 2) + sum(r.wall_s for r in records[:index])
                                                      for index in range(6)]


@pytest.mark.timing
def test_watch_as_a_context_manager_finds_the_optimizer_steps() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SlowDataset(size=40, delay_s=0.001), batch_size=2)
    with watch(steps=5, warmup=1) as w:
        for inputs, labels in loader:  # the DataLoader is patched inside the with-block
            train_step(model, optimizer, torch.cat([inputs, inputs, inputs[:, :2]], dim=1), labels)
    assert w.watcher.source == "optimizer" and len(w.records) == 5
    assert all(record.batch_size == 2 and record.data_wait_s >= 2 * 0.001 for record in w.records)


@pytest.mark.timing
def test_host_samples_are_taken_in_the_background() -> None:
    with watch(steps=30, warmup=0, profile_steps=0) as w:
        for _ in range(31):
            time.sleep(0.03)
            w.step()
    samples = w.watcher.samples  # those taken while the 30 steps ran: 0.9 s or more
    assert len(samples) >= 3  # 10 Hz: 9 or so, a third of that however slow the sampler's start
    assert all(len(sample.cpu_per_core_percent) == psutil.cpu_count() for sample in samples)
    assert all(sample.gpu_utilization_percent is None for sample in samples)  # no CUDA used here
    total = psutil.virtual_memory().total
    assert all(sample.ram_total_bytes == total and 0 < sample.ram_used_bytes <= total for sample in samples)
    assert all(sample.disk_read_bytes_per_s is None or sample.disk_read_bytes_per_s >= 0 for sample in samples)


def test_watch_report_uses_the_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = fake_clock(monkeypatch)
    loader = DataLoader(TickingDataset(clock, size=48, delay_s=0.00390625), batch_size=4)
    model = nn.Linear(3, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    watched = watch(loader, steps=8, warmup=1)
    for inputs, labels in watched:
        train_step(model, optimizer, inputs, labels)
    report = watched.report()
    assert report.verdict.steps == 8 and report.verdict.device == "cpu"
    # the clock moves only while the loader loads: every step is all wait, and the rules say so
    assert report.verdict.primary == "input_bound" and report.verdict.data_wait == 1.0


ONES = torch.ones(4)


def known_step(watcher: Watcher, adds: int = 7, muls: int = 3) -> bool:
    """`adds` torch.add and `muls` torch.mul (one top-level aten operator each), then a boundary."""
    a = b = ONES
    for _ in range(adds):
        torch.add(a, b)
    for _ in range(muls):
        torch.mul(a, b)
    return watcher.step_boundary("manual")


def test_the_profiled_window_follows_the_watched_steps() -> None:
    watcher = Watcher(steps=2, warmup=1, profile_steps=2)
    for _ in range(4):  # a start, a warm-up step, 2 watched
        known_step(watcher)
    assert watcher.watched and not watcher.done and len(watcher.records) == 2
    known_step(watcher)  # the profiler's warm-up step
    known_step(watcher)
    assert not watcher.done
    known_step(watcher)  # the second recorded step ends: done
    assert watcher.done and not known_step(watcher) and watcher.steps_closed == 6
    assert [step.operators for step in watcher.profile.steps] == [10, 10] and watcher.profile.reason is None
    seen = watcher.observe()
    assert seen.profile.operators_per_step == 10 and len(seen.profile.steps) == 2
    lines = [note.text for note in seen.notes]
    assert "kernel launches: the device is the CPU (its operators are counted)" in lines
    assert not any(line.startswith("operators and kernel launches") for line in lines)
    watcher.close()


def test_without_profiling_the_watch_ends_with_the_watched_steps() -> None:
    watcher = Watcher(steps=2, warmup=0, profile_steps=0)
    for _ in range(3):
        known_step(watcher)
    assert watcher.done and watcher.profile is None and watcher.observe().profile is None
    assert Note("unmeasured", "operators and kernel launches: not profiled (profile_steps=0)") in \
        watcher.observe().notes


def test_a_loop_that_ends_inside_the_profiled_window_keeps_what_was_profiled() -> None:
    watcher = Watcher(steps=1, warmup=0, profile_steps=5)
    for _ in range(2 + 3):  # a start, the watched step, the profiler's warm-up and 2 recorded steps
        known_step(watcher)
    assert not watcher.done
    assert watcher.observe().profile is None  # still running: nothing to report yet, and it says so
    assert any("had not ended" in note.text for note in watcher.observe().notes)
    watcher.close()  # the loop ended
    assert watcher.done and [step.operators for step in watcher.profile.steps] == [10, 10]
    assert (Note("unmeasured", "operators and kernel launches: 2 of 5 steps profiled (the loop ended first)")
            in watcher.observe().notes)


@pytest.mark.timing
def test_many_tiny_operators_are_launch_overhead_on_the_cpu() -> None:
    watcher = Watcher(steps=10, warmup=2)
    outcome = run_script(str(SCRIPTS / "many_tiny_ops.py"), [], False, watcher, timeout_s=30)
    report = diagnose(watcher.observe())
    assert outcome.problem is None and watcher.done and len(watcher.profile.steps) == 5
    # 100 layers: forward linear x100 + mse_loss; backward: t/mm/sum per layer...; SGD: 200 add_: over 1000
    counts = [step.operators for step in watcher.profile.steps]
    assert min(counts) > 1000 and max(counts) - min(counts) <= 2  # the profiler counts one more now and then
    # found by either way, each far from its threshold: some 10 us per operator against 100 (loaded 2-core VM,
    # and FLOPs a decade under a thousandth of the peak), or 25-45% of the profiled step outside operators against
    # 20%. Which finding leads is not asserted: the batch probe's small_batch reads the same fixed cost, and
    # leads when its share is larger (test_verdict.py decides between them on hand-made observations)
    (found,) = [f for f in report.findings if f.kind == "launch_overhead"]
    assert found.severity in ("medium", "high") and found.evidence["operators_per_step"] > 1000
    assert "torch.compile" in found.snippet


@pytest.mark.timing
def test_a_compute_bound_script_raises_no_launch_alarm() -> None:
    watcher = Watcher(steps=5, warmup=1)  # its steps are long on a small CPU: 13 of them in all
    outcome = run_script(str(SCRIPTS / "compute_bound.py"), [], False, watcher, timeout_s=30)
    report = diagnose(watcher.observe())
    assert outcome.problem is None and len(watcher.profile.steps) == 5
    assert all(step.operators < 200 for step in watcher.profile.steps)  # 3 wide layers and Adam
    assert report.verdict.primary == "compute_bound" and "launch_overhead" not in [f.kind for f in report.findings]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_copies_waits_and_compute_are_recorded() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    pageable = torch.randn(64, 256)
    pinned, nbytes = pageable.pin_memory(), pageable.nelement() * pageable.element_size()
    with watch(steps=4, warmup=1) as w:
        for step in range(6):  # a start, a warm-up step, 4 watched: pageable, pinned, pageable, pinned
            inputs = (pinned if step % 2 else pageable).to("cuda", non_blocking=True)
            loss = model(inputs).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss.item()  # the host waits for the device
            w.step()
    records = w.records
    assert w.watcher.device == "cuda" and len(records) == 4
    assert [r.copy_bytes for r in records] == [nbytes] * 4
    assert [r.copy_pageable_bytes for r in records] == [nbytes, 0, nbytes, 0]
    assert all(r.sync_count >= 1 and r.sync_s > 0 for r in records)
    assert all(r.compute_s is not None and 0 < r.compute_s <= r.wall_s * 1.05 for r in records)
    assert w.watcher.observe().memory.peak_bytes > 0


def test_an_embedding_bag_batch_counts_the_loader_s_samples_not_its_tokens() -> None:
    watcher = Watcher(steps=10, warmup=2, profile_steps=0)
    outcome = run_script(str(SCRIPTS / "text_bag.py"), [], False, watcher, timeout_s=60)
    seen = watcher.observe()
    assert outcome.problem is None and seen.batch_size == 64
    assert all(record.batch_size == 64 for record in seen.steps)
    assert any(note.text == "batch size: counted from the DataLoader's batch_size" for note in seen.notes)
    report = diagnose(seen)
    # samples/s from 64 a batch: the model's rate is 64 x steps over its time, hand-derived from the records
    feeding = sum(r.wall_s - r.data_wait_s for r in seen.steps)
    assert report.model_samples_per_s == pytest.approx(64 * len(seen.steps) / feeding)
