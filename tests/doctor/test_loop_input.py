"""The loop's own input work (`loop_input_s`: a loop that reads its batches itself, no DataLoader): timed from the
step's start to its first training forward on a fake clock, taken out of backward_s, None where a DataLoader feeds
the steps or the clock's boundary is the forward itself; counted as input by the findings (input_bound in its own
words, small_batch's model time without it) on hand-made steps; and end to end, a nanoGPT-like loop reading
64-token blocks from a np.memmap with a deliberate sleep in each read (tests/doctor/scripts/memmap_loop.py)."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest
import torch
from observations import by_kind, fake_clock, host, on_cpu, steps

from gpufeed.doctor.findings.diagnose import diagnose, throughputs
from gpufeed.doctor.findings.kinds.input_bound import LOOP_NOT_TRIED
from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import rates_sentence
from gpufeed.doctor.observation import BatchProbe
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.measure.steps import backward_seconds

SCRIPTS = Path(__file__).parent / "scripts"
IDS = torch.randint(0, 256, (8, 64))  # a batch of token ids, as the loop slices it
MODEL = torch.nn.Embedding(300, 2)  # the step's model: only its calls matter here
SLEEP_S = 0.1  # memmap_loop.py's --sleep-ms, in seconds: a lower bound of each read


def test_backward_seconds_leaves_out_the_loops_input() -> None:
    # a 100 ms step: 40 ms reading its batch, 2 + 1 ms copies and syncs, 10 ms forward, 20 ms optimizer: 27 ms left
    assert backward_seconds(0.1, 0.0, 0.002, 0.001, 0.01, 0.02, 0.04) == pytest.approx(0.027, abs=1e-12)
    assert backward_seconds(0.1, 0.0, 0.002, 0.001, 0.01, 0.02, None) == pytest.approx(0.067, abs=1e-12)  # untimed
    assert backward_seconds(0.05, 0.0, 0.0, 0.0, 0.01, 0.02, 0.04) == 0.0  # hand-fed parts over the wall: clamped
    assert backward_seconds(0.1, 0.0, 0.0, 0.0, None, 0.02, 0.04) is None


def _optimizer_steps(watcher: Watcher, clock, reads: list[tuple[float, float, float, float]]) -> None:
    """The optimizer's clock: a start, then one step per (read_s, copy_s, validation_s, forward_s): the loop
    reads (and copies) its batch, runs a validation forward under no_grad, then the model's training forward."""
    watcher.timing("forward")
    watcher.timing("optimizer")
    watcher.step_boundary("optimizer")
    for read_s, copy_s, validation_s, forward_s in reads:
        clock.advance(read_s)
        watcher.on_copy(copy_s, 1024, pinned=False)
        clock.advance(copy_s)
        clock.advance(validation_s)
        watcher.on_no_grad_forward_time(validation_s)
        watcher.on_model_call(MODEL, (IDS,), {})
        clock.advance(forward_s)
        watcher.on_forward_time(forward_s)
        watcher.on_model_call(MODEL, (IDS,), {})  # a second micro-batch: the first forward ended the input work
        clock.advance(0.0625)  # its loss and backward
        watcher.step_boundary("optimizer")


def test_the_watcher_times_the_input_from_the_steps_start_to_its_first_training_forward(monkeypatch) -> None:
    clock = fake_clock(monkeypatch)
    watcher = Watcher(steps=2, warmup=0, profile_steps=0)
    _optimizer_steps(watcher, clock, [(0.25, 0.03125, 0.125, 0.0078125), (0.0, 0.0, 0.0, 0.0078125)])
    first, second = watcher.records
    # the read, without its copy (copy_s already) nor the validation forward (the rest of the step, as before)
    assert first.loop_input_s == 0.25 and first.copy_s == 0.03125
    assert first.backward_s == 0.125 + 0.0625 and first.wall_s == 0.25 + 0.03125 + 0.125 + 0.0078125 + 0.0625
    assert (second.loop_input_s, second.backward_s) == (0.0, 0.0625)  # timed, nothing read: 0.0, not None
    assert first.input_s == 0.25 and first.tokens == 2 * IDS.numel()


def test_a_dataloader_or_the_forward_clock_leaves_the_loops_input_untimed(monkeypatch) -> None:
    clock = fake_clock(monkeypatch)
    fed = Watcher(steps=2, warmup=0, profile_steps=0)
    fed.timing("forward")
    fed.on_batch_wait(0.0, (IDS, IDS))  # a DataLoader's batch before the optimizer's clock began
    _optimizer_steps(fed, clock, [(0.25, 0.0, 0.0, 0.0078125)] * 2)
    assert [r.loop_input_s for r in fed.records] == [None, None]
    assert fed.records[0].backward_s == 0.25 + 0.0625  # the read stays in the rest, as before issue 32
    late = Watcher(steps=1, warmup=0, profile_steps=0)
    late.timing("forward")
    late.step_boundary("optimizer")
    late.on_batch_wait(0.0, (IDS, IDS))  # a batch inside a step that began timed: that step is not the loop's
    late.on_model_call(MODEL, (IDS,), {})
    late.step_boundary("optimizer")
    assert late.records[0].loop_input_s is None
    forward = Watcher(steps=1, warmup=0, profile_steps=0)  # the forward's clock: its boundary is the forward
    forward.timing("forward")
    for _ in range(2):
        forward.step_boundary("forward")
        forward.on_model_call(MODEL, (IDS,), {})
    assert forward.records[0].loop_input_s is None
    unknown = Watcher(steps=1, warmup=0, profile_steps=0)  # the step's model not yet known
    for _ in range(2):
        unknown.step_boundary("optimizer")
    assert unknown.records[0].loop_input_s is None


def _loop_steps(count: int, wall: float, loop_input: float) -> list:
    return [dataclasses.replace(record, loop_input_s=loop_input) for record in steps(count, wall=wall, wait=0.0)]


def test_the_loops_input_is_input_bound_in_its_own_words_and_not_the_models_fixed_cost() -> None:
    # steps of 1 ms, 0.6 ms of it the loop reading its batch (no DataLoader: workers unknown); the model's 0.4 ms
    # mostly fixed cost (the probe's 4x batch costs 0.3 ms against 0.25 ms at 1x)
    probe = BatchProbe(2, ((1, 0.00025), (2, 0.00027), (4, 0.0003)), 5)
    seen = on_cpu(_loop_steps(20, 0.001, 0.0006), host(), batch_size=2, workers=None, probe=probe)
    report = diagnose(seen)
    found = by_kind(report)
    assert report.verdict.primary == "input_bound" and report.verdict.data_wait == pytest.approx(0.6)
    loop = found["input_bound"]
    assert loop.share == pytest.approx(0.6) and loop.evidence["input_source"] == "loop"
    assert loop.evidence["loop_input_ms"] == pytest.approx(0.6)
    assert loop.evidence["share_interval"] == [pytest.approx(0.6), pytest.approx(0.6)]  # per step: input_s
    assert loop.fix.startswith("The loop builds each batch itself (0.6 ms a step, 60% of the step, between the "
                               "optimizer step and the next forward)")
    assert "Dataset served by a DataLoader" in loop.fix and "np.memmap" in loop.fix
    assert "already has" not in loop.fix and "gpufeed pack" not in loop.fix  # no loader's advice
    assert KINDS["input_bound"].experiments(loop, cuda=True) == ([], LOOP_NOT_TRIED)
    # small_batch's model time leaves the read out: 0.4 ms a step for 1 batch, not the whole 1 ms
    assert found["small_batch"].evidence["model_ms_per_batch"] == pytest.approx(0.4)
    # the read runs in series with the model: 2 samples in 0.6 ms read, 0.4 ms fed
    assert throughputs(seen) == (pytest.approx(2 / 0.0006), pytest.approx(2 / 0.0004))
    assert rates_sentence(report.to_json()).startswith("The loop builds its batches itself (no DataLoader), so its "
                                                       "reading runs in series with the model")
    quiet = on_cpu(_loop_steps(20, 0.001, 0.00001), host(), batch_size=2, workers=None, probe=probe)
    assert "input_bound" not in by_kind(diagnose(quiet))  # 1% of the step reading: under input_bound's level


def test_torchs_own_gap_is_not_judged_even_when_one_step_was_descheduled_in_it() -> None:
    # a bare loop: 35 µs between the optimizer step and the next forward in steps of 0.3 ms; on a busy host one of
    # ten steps lost 10 ms in that gap, which makes the mean 1.0 ms a step (10.35 of the 13 ms watched: 80%)
    quiet = _loop_steps(10, 0.0003, 0.000035)
    quiet[4] = dataclasses.replace(quiet[4], wall_s=0.0103, loop_input_s=0.010035)
    report = diagnose(on_cpu(quiet, host(), batch_size=2, workers=None))
    assert "input_bound" not in by_kind(report)
    assert any(note.startswith("loop input: 35 µs in the median step between the optimizer step and the next "
                               "forward (80% of the step in all), under 0.1 ms") for note in report.unmeasured)


@pytest.fixture(scope="module")
def memmap_runs() -> dict:
    """The doctor's watch of memmap_loop.py with a SLEEP_S sleep in each read and without: {sleep: (records,
    report)}, on one torch thread (tests/doctor/conftest.py's reason)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs = {}
    try:
        for sleep_s in (SLEEP_S, 0.0):
            watcher = Watcher(steps=6, warmup=2, profile_steps=0)
            outcome = run_script(str(SCRIPTS / "memmap_loop.py"), ["--sleep-ms", str(1000 * sleep_s)], False,
                                 watcher, timeout_s=60)
            assert outcome.error is None and outcome.problem is None, outcome
            runs[sleep_s] = (watcher.records, diagnose(watcher.observe()))
    finally:
        torch.set_num_threads(threads)
    return runs


@pytest.mark.timing
@pytest.mark.slow  # the module's two doctor runs and the batch probe: 8 to 12 s on 2 busy cores
def test_each_watched_step_holds_the_read_in_its_loop_input_not_its_backward(memmap_runs) -> None:
    records, report = memmap_runs[SLEEP_S]
    assert len(records) == 6
    for record in records:
        assert record.loop_input_s >= SLEEP_S, record  # the sleep is inside the read: a lower bound
        assert record.data_wait_s == 0.0 and record.tokens == 8 * 64
    # counted in backward_s, the sleep alone would put it at SLEEP_S or more; without it, the model's backward is
    # 15-45 ms here (unloaded to loaded machine), its median far under SLEEP_S
    assert statistics.median(record.backward_s for record in records) < SLEEP_S, records
    assert [step["loop_input_s"] for step in report.to_json()["timeline"]["steps"]] == [
        record.loop_input_s for record in records]


@pytest.mark.timing
@pytest.mark.slow  # the module's two doctor runs and the batch probe: 8 to 12 s on 2 busy cores
def test_the_memmap_loop_with_a_slow_read_is_input_bound_in_the_loops_words(memmap_runs) -> None:
    _, report = memmap_runs[SLEEP_S]
    found = by_kind(report)
    assert report.verdict.primary == "input_bound", [(f.kind, f.share) for f in report.findings]
    assert found["input_bound"].evidence["input_source"] == "loop"
    assert found["input_bound"].fix.startswith("The loop builds each batch itself (")
    assert "small_batch" not in found or found["small_batch"].share < found["input_bound"].share


@pytest.mark.timing
@pytest.mark.slow  # the module's two doctor runs and the batch probe: 8 to 12 s on 2 busy cores
def test_the_memmap_loop_without_the_sleep_is_not_input_bound(memmap_runs) -> None:
    records, report = memmap_runs[0.0]
    assert all(record.loop_input_s is not None for record in records)  # timed, and small
    assert report.verdict.primary != "input_bound" and "input_bound" not in by_kind(report)
