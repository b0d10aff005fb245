"""`gpufeed doctor` on small training scripts (tests/doctor/scripts): the script runs as plain python would run it,
steps are found for each kind of loop, and a crash, an early exit or a script that never trains end with a clear
outcome. The records are checked against what the scripts do (sleeps, periods, batch sizes), not through the rules:
a duration only from below (a sleep only overruns), or against a gap an order of magnitude wider.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import dataloader
from torch.utils.data._utils import fetch

from gpufeed.cli.main import main
from gpufeed.doctor.notes import Note
from gpufeed.doctor.observation import Host, LoaderParts, LoaderSettings, MemoryReading, Ranks, StepShape
from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher

SCRIPTS = Path(__file__).parent / "scripts"


def doctor(name: str, *args: str, steps: int = 20, warmup: int = 3, timeout_s: float = 20.0,
           profile_steps: int | None = None):
    """`name` under the doctor; `profile_steps` None: the Watcher's default window."""
    watcher = Watcher(steps=steps, warmup=warmup, **({} if profile_steps is None else {"profile_steps": profile_steps}))
    outcome = run_script(str(SCRIPTS / f"{name}.py"), list(args), False, watcher, timeout_s=timeout_s)
    return watcher, outcome


def patched_state() -> dict:
    """Everything the doctor patches or sets, as identities and sizes to compare before and after."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    return {"tensor": {name: torch.Tensor.__dict__.get(name) for name in ("to", "cuda", "cpu", "copy_", "item",
                                                                           "tolist")},
            "synchronize": torch.cuda.__dict__.get("synchronize"),
            "next": dataloader._BaseDataLoaderIter.__dict__.get("__next__"),
            "iterator init": dataloader._BaseDataLoaderIter.__dict__.get("__init__"),
            "fetch": fetch._MapDatasetFetcher.__dict__.get("fetch"),
            "iter": dataloader.DataLoader.__dict__.get("__iter__"),
            "hooks": (len(module._global_forward_pre_hooks), len(module._global_forward_hooks),
                      len(optimizer._global_optimizer_pre_hooks), len(optimizer._global_optimizer_post_hooks)),
            "signal": signal.getsignal(signal.SIGUSR1), "showwarning": warnings.showwarning,
            "filters": list(warnings.filters), "argv": list(sys.argv), "path": list(sys.path),
            "cwd": os.getcwd(), "threads": torch.get_num_threads()}


@pytest.mark.parametrize("as_module", [False, True])
def test_the_script_sees_what_plain_python_shows_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    as_module: bool) -> None:
    monkeypatch.chdir(SCRIPTS)
    target = "reports_itself" if as_module else str(SCRIPTS / "reports_itself.py")
    # the reference: plain python, 0 steps (the script then writes what it sees and does not import torch)
    plain = subprocess.run([sys.executable, *(["-m"] if as_module else []), target, str(tmp_path / "plain.json"),
                            "0"], capture_output=True, text=True, check=True)
    assert plain.returncode == 0
    watcher = Watcher(steps=3, warmup=1)
    outcome = run_script(target, [str(tmp_path / "doctor.json"), "30"], as_module, watcher, timeout_s=20)
    expected, seen = (json.loads((tmp_path / name).read_text()) for name in ("plain.json", "doctor.json"))
    assert seen["name"] == expected["name"] == "__main__"
    assert seen["path0"] == expected["path0"] and seen["cwd"] == expected["cwd"]
    assert seen["argv"][0] == expected["argv"][0]
    assert seen["argv"][1:] == [str(tmp_path / "doctor.json"), "30"]
    assert outcome.problem is None and len(watcher.records) == 3


def test_every_patch_is_restored_even_with_the_cuda_patches_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    before = patched_state()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the CUDA patches, exercised on CPU tensors
    instrumentation = Instrumentation(Watcher(), patch_loader=True)
    instrumentation.install()
    try:
        during = patched_state()
        assert during["tensor"]["to"] is not before["tensor"]["to"] and during["next"] is not before["next"]
        assert during["hooks"] != before["hooks"]
        assert torch.ones(3).to(torch.float64).tolist() == [1.0, 1.0, 1.0]  # the patched methods still work
    finally:
        instrumentation.remove()
    assert patched_state() == before
    for name in ("input_bound", "crashes", "never_trains"):
        doctor(name, timeout_s=1.5)
        assert patched_state() == before, name


@pytest.mark.timing
def test_data_waits_are_measured_in_a_loop_that_waits_for_its_loader() -> None:
    watcher, outcome = doctor("input_bound")
    records = watcher.records
    assert outcome.problem is None and watcher.source == "optimizer" and len(records) == 20
    assert all(record.batch_size == 4 for record in records)
    assert all(record.data_wait_s >= 4 * 0.005 for record in records)  # 4 samples that sleep 5 ms each
    assert all(record.data_wait_s < record.wall_s for record in records)  # the wait is inside the step
    assert watcher.loader_workers == 0 and watcher.loader_pin_memory is False
    assert all(record.compute_s is None and record.copy_bytes == 0 for record in records)  # the CPU: not measured


@pytest.mark.timing
def test_the_observation_holds_every_reading_of_the_run() -> None:
    watcher, outcome = doctor("input_bound", steps=5, warmup=1)
    seen = watcher.observe()
    # the background sampler (10 Hz) read the host at least once in the run's 0.2 s or more
    assert outcome.problem is None and len(seen.steps) == 5 and seen.samples and seen.script_error is None
    assert seen.device == "cpu" and seen.host == Host(os.cpu_count(), torch.get_num_threads())
    # one epoch of 64 batches: no worker restarted; the loader's default collate function, nothing it cannot time
    collate = torch.utils.data.default_collate
    site = f"torch/utils/data/_utils/collate.py:{collate.__code__.co_firstlineno}"  # from its package
    assert seen.loader == LoaderSettings(0, False, 0.0, LoaderParts("default_collate", site, ()))
    assert seen.shape == StepShape(4, 1, 4) and seen.float64_seen is False and seen.autocast_seen is False
    assert seen.memory == MemoryReading(None, None, None)
    assert Note("unmeasured", "device memory: the device is the CPU") in seen.notes
    assert seen.ranks == Ranks(world_size=1, per_rank=(), missing=())  # one process
    assert [step.operators > 0 for step in seen.profile.steps] == [True] * 5  # the window after the watched steps


def test_loader_workers_in_child_processes_keep_working() -> None:
    watcher, outcome = doctor("input_bound", "2")
    assert outcome.problem is None and len(watcher.records) == 20 and watcher.loader_workers == 2
    assert all(record.batch_size == 4 for record in watcher.records)


def test_a_compute_bound_loop_never_waits() -> None:
    watcher, outcome = doctor("compute_bound", steps=5, warmup=1, profile_steps=0)
    records = watcher.records
    assert outcome.problem is None and len(records) == 5 and watcher.float64_seen is False
    assert [r.data_wait_s for r in records] == [0.0] * 5  # tensors sliced in memory: no loader to wait for
    assert watcher.observe().shape.batch_size == 64  # from the model's input: no loader here


@pytest.mark.timing  # every step took some time (wall_s > 0)
@pytest.mark.parametrize(("name", "clock", "batch_size"), [
    ("input_bound", "optimizer", 4),  # a DataLoader and an optimizer: the optimizer's step wins
    ("compute_bound", "optimizer", 64),  # tensors sliced in memory, an optimizer
    ("loader_no_optimizer", "loader", 16),  # a DataLoader, hand-written SGD
    ("no_loader_no_optimizer", "forward", 32),  # neither: the model's forward after a backward
])
def test_the_step_clock_for_each_kind_of_loop(name: str, clock: str, batch_size: int) -> None:
    watcher, outcome = doctor(name, steps=8, warmup=2)
    assert outcome.problem is None and watcher.source == clock
    assert len(watcher.records) == 8 and all(record.wall_s > 0 for record in watcher.records)
    assert watcher.observe().shape.batch_size == batch_size


@pytest.mark.timing
def test_one_record_per_iteration_shows_a_stall_every_tenth_step() -> None:
    watcher, outcome = doctor("periodic_stall", profile_steps=0)
    walls = [record.wall_s for record in watcher.records]
    assert outcome.problem is None and len(walls) == 20
    # the script sleeps 0.2 s after the optimizer steps of iterations 0, 10, 20: in the steps that end at
    # iterations 11 and 21, records 7 and 17 (iteration 0 is the start, 1-3 the warm-up, record i iteration 4 + i)
    stalls = [7, 17]
    assert all(walls[index] >= 0.2 for index in stalls)
    # the other steps hold no stall: a step of a small MLP takes milliseconds, so their median stays below half a
    # stall (an order of magnitude from it) however busy the machine, while one stray slow step does not move it
    assert statistics.median(wall for index, wall in enumerate(walls) if index not in stalls) < 0.2 / 2


def test_float64_is_seen() -> None:
    watcher, _ = doctor("float64", steps=5, warmup=1)
    assert watcher.float64_seen is True and watcher.observe().float64_seen is True


def test_the_threads_the_script_set_are_reported_and_ours_restored() -> None:
    threads = torch.get_num_threads()
    watcher, outcome = doctor("oversubscribed", steps=5, warmup=1)
    assert outcome.problem is None and watcher.observe().host.threads == 8 and torch.get_num_threads() == threads


def test_a_crash_gives_one_line_and_the_steps_watched_so_far() -> None:
    watcher, outcome = doctor("crashes", warmup=0)
    raise_line = next(number for number, line in enumerate((SCRIPTS / "crashes.py").read_text().splitlines(), 1)
                      if "raise ValueError" in line)
    assert re.fullmatch(rf"ValueError: loss became NaN at step 3 \(.*crashes\.py:{raise_line}\)", outcome.error)
    assert outcome.steps_seen == 2 and len(watcher.records) == 2  # 3 optimizer steps: a start and 2 steps
    assert not outcome.exited_early and not outcome.timed_out and "raised ValueError" in outcome.problem


@pytest.mark.timing
def test_a_script_that_never_trains_is_stopped_after_the_timeout() -> None:
    start = time.monotonic()
    watcher, outcome = doctor("never_trains", timeout_s=2.0)
    # stopped at the 2 s timeout, not after the script's own sleep of 100 s: 30 s is an order of magnitude from both
    assert time.monotonic() - start < 30.0
    assert outcome.timed_out and outcome.steps_seen == 0 and watcher.records == []
    assert outcome.problem.startswith("no training step seen in 2 s (1 forward call, no backward pass")


def test_a_script_that_exits_early() -> None:
    watcher, outcome = doctor("exits_early")
    assert outcome.exited_early and outcome.error is None and outcome.exit_status == 0
    assert outcome.steps_seen == 1 and "2 optimizer steps" in outcome.problem


# --- the command line ---------------------------------------------------------------------------------------


def test_a_missing_script_is_wrong_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status = main(["doctor", str(tmp_path / "absent.py")])
    captured = capsys.readouterr()
    assert status == 2 and captured.err.startswith("error: ") and captured.err.count("\n") == 1
    assert "does not exist" in captured.err and captured.out == ""


@pytest.mark.timing
@pytest.mark.slow
def test_the_command_writes_the_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    # 4 samples of 10 ms a batch against a Linear(8, 2): the wait is some 95% of the step, so input_bound leads
    # however much a busy machine stretches the model's millisecond or two, and replaying cached batches (--try)
    # makes the step over ten times faster
    status = main(["doctor", "--steps", "6", "--warmup", "2", "--try", "--repeats", "1", "--json", str(target),
                   str(SCRIPTS / "loader_parts.py"), "--getitem-ms", "10"])
    captured = capsys.readouterr()
    document = json.loads(target.read_text())
    assert status == 0 and {"verdict", "findings", "unmeasured"} <= set(document)
    assert document["verdict"]["steps"] == 6 and document["verdict"]["device"] == "cpu"
    leading = document["findings"][0]
    assert leading["kind"] == "input_bound" and leading["gain"]["bound"] > 1.0  # replayed batches beat the loader
    assert "verdict:" in captured.out and "findings" in captured.out
    # the notes about the run (6 steps cannot show a beat longer than 3, say) print as "note:", the rest of
    # unmeasured as "not measured:"
    printed = " ".join(captured.out.split())
    assert set(document["notes"]) <= set(document["unmeasured"])
    for line in document["unmeasured"]:
        prefix = "note" if line in document["notes"] else "not measured"
        assert f"{prefix}: {' '.join(line.split())}" in printed, line


def test_the_command_fails_for_a_crash_and_still_writes_json(capsys: pytest.CaptureFixture[str],
                                                             tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    status = main(["doctor", "--json", str(target), str(SCRIPTS / "crashes.py")])
    captured = capsys.readouterr()
    document = json.loads(target.read_text())
    assert status == 1 and document["script_error"].startswith("ValueError: loss became NaN")
    assert document["verdict"]["steps"] == 0 and "raised ValueError" in captured.out
