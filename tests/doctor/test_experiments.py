"""`gpufeed doctor --try`: experiments re-run the test scripts with one change and measure the gain against the
baseline run. Gains are checked only where the script makes them large and certain (sleeps); elsewhere the tests
check that the change took effect, that failures become `unmeasured` lines, and that every patch is undone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn.modules import module
from torch.utils.data import DataLoader, dataloader

from gpufeed.cli.main import main
from gpufeed.doctor import experiments
from gpufeed.doctor.experiments import (
    Changes,
    Experiment,
    autocast_forward,
    loader_experiment,
    plan_experiments,
    run_experiments,
    run_trial,
)
from gpufeed.doctor.inject import run_script
from gpufeed.doctor.report import Finding, Report, Verdict
from gpufeed.doctor.watch import Watcher

SCRIPTS = Path(__file__).parent / "scripts"


def patched_state() -> dict:
    """What the experiments patch, as identities and counts to compare before and after."""
    from torch.optim import optimizer

    return {"init": DataLoader.__dict__.get("__init__"), "iter": DataLoader.__dict__.get("__iter__"),
            "next": dataloader._BaseDataLoaderIter.__dict__.get("__next__"),
            "hooks": (len(module._global_forward_pre_hooks), len(module._global_forward_hooks),
                      len(optimizer._global_optimizer_post_hooks)),
            "autocast": (torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda"))}


def baseline(name: str, steps: int = 10, warmup: int = 2) -> tuple[Report, list]:
    watcher = Watcher(steps=steps, warmup=warmup)
    outcome = run_script(str(SCRIPTS / f"{name}.py"), [], False, watcher, timeout_s=20)
    assert outcome.problem is None
    return watcher.report(), watcher.records


def finding(kind: str, severity: str, evidence: dict) -> Finding:
    return Finding(kind, severity, 0.5, evidence, "fix", "snippet", None, "high")


def test_replaying_batches_and_more_workers_are_measured_on_a_loop_that_waits_for_its_loader() -> None:
    before = patched_state()
    report, records = baseline("input_bound")
    assert report.findings[0].kind == "input_bound" and report.findings[0].severity == "high"
    findings, unmeasured = run_experiments(str(SCRIPTS / "input_bound.py"), [], False, report, records, steps=10,
                                           warmup=2, timeout_s=20)
    assert patched_state() == before
    gain = findings[0].gain
    # Each sample sleeps 5 ms, so a batch of 4 waits >= 20 ms against well under 1 ms of model work on any CPU:
    # served from memory the step loses that wait, ~20x in theory. 1.5 leaves room for a slow or busy machine
    # and still fails if the replay did not take (the ratio would then be ~1).
    assert gain is not None and gain.measured > 1.5
    baseline_rate = sum(r.batch_size for r in records) / sum(r.wall_s for r in records)  # 4 samples per step
    replay_how, workers_how = gain.how.split("; ")
    rates = re.fullmatch(r"replayed the first 8 batches .*: 10 steps, ([\d,.]+) vs ([\d,.]+) samples/s", replay_how)
    assert rates is not None, replay_how
    new, old = (float(rate.replace(",", "")) for rate in rates.groups())
    assert old == pytest.approx(baseline_rate, rel=0.01) and new / old == pytest.approx(gain.measured, rel=0.01)
    workers = re.fullmatch(r"DataLoader\(num_workers=\d+, persistent_workers=True\): 10 steps, [\d,.]+ vs "
                           r"[\d,.]+ samples/s \(([\d.]+)x\)", workers_how)
    assert workers is not None and float(workers.group(1)) > 0, workers_how  # 2 cores here: any value is honest
    assert [f.gain for f in findings[1:]] == [None] * (len(findings) - 1)  # small_batch (low): not tried
    assert not any(line.startswith("verified fix for input_bound") for line in unmeasured)


def test_no_experiment_without_a_high_or_medium_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    report, records = baseline("compute_bound")
    assert all(f.severity not in ("high", "medium") for f in report.findings)

    def must_not_run(*args, **kwargs):
        raise AssertionError("an experiment ran")

    monkeypatch.setattr(experiments, "run_script", must_not_run)
    findings, unmeasured = run_experiments(str(SCRIPTS / "compute_bound.py"), [], False, report, records, 10, 2)
    assert findings == report.findings and unmeasured == [
        "verified fixes (--try): none tried, no finding of high or medium severity"]


def test_a_crashing_experiment_is_a_line_in_unmeasured() -> None:
    before = patched_state()
    report, records = baseline("input_bound", steps=5)
    findings, unmeasured = run_experiments(str(SCRIPTS / "crashes.py"), [], False, report, records, 5, 2, 20)
    assert patched_state() == before and findings == report.findings  # no gain anywhere
    for name in ("replay", "workers"):
        assert any(line.startswith(f"verified fix for input_bound ({name}): the script raised ValueError: loss "
                                   "became NaN") for line in unmeasured), unmeasured


def test_a_change_that_breaks_is_reported_and_undone() -> None:
    before = patched_state()

    def install(changes: Changes) -> None:
        experiments.replay(changes)
        raise RuntimeError("cannot patch this")

    trial = run_trial(Experiment("input_bound", "broken", "a broken change", install), str(SCRIPTS /
                      "input_bound.py"), [], False, [], steps=3, warmup=0)
    assert trial.gain is None and trial.problem.startswith("the experiment failed: RuntimeError: cannot patch this")
    assert patched_state() == before


def test_a_change_that_does_not_take_is_not_a_gain() -> None:
    report, records = baseline("compute_bound")  # tensors sliced in memory: no DataLoader to change
    doubled = run_trial(loader_experiment("small_batch", "double_batch", batch_factor=2),
                        str(SCRIPTS / "compute_bound.py"), [], False, records, steps=5, warmup=1)
    assert doubled.gain is None and doubled.problem.startswith("no DataLoader batch size was read")
    replayed = run_trial(plan_for("input_bound", {"loader_workers": 0, "suggested_workers": 2})[0],
                         str(SCRIPTS / "compute_bound.py"), [], False, records, steps=5, warmup=1)
    assert replayed.gain is None and replayed.problem.startswith("no DataLoader batch was replayed")


def test_a_doubled_batch_reaches_the_loader() -> None:
    _, records = baseline("input_bound", steps=5)
    trial = run_trial(loader_experiment("small_batch", "double_batch", batch_factor=2),
                      str(SCRIPTS / "input_bound.py"), [], False, records, steps=5, warmup=1)
    assert trial.gain is not None and trial.gain.measured > 0 and "batch_size x2" in trial.gain.how  # 4 -> 8


def plan_for(kind: str, evidence: dict, device: str = "cpu") -> list[Experiment]:
    report = Report(Verdict(kind, None, 0.5, 10, device), [finding(kind, "high", evidence)])
    return plan_experiments(report)[0]


def test_the_plan_follows_the_findings_and_stops_at_three() -> None:
    findings = [finding("input_bound", "high", {"loader_workers": 0, "suggested_workers": 8, "pin_memory": False}),
                finding("sync_stall", "high", {}), finding("small_batch", "medium", {"batch_size": 4}),
                finding("precision", "medium", {"autocast_seen": False}), finding("periodic_stall", "low", {})]
    planned, unmeasured = plan_experiments(Report(Verdict("input_bound", 0.3, 0.5, 10, "cuda:0 (H200)"), findings))
    assert [e.name for e in planned] == ["replay", "workers", "double_batch"]
    assert planned[1].description == "DataLoader(num_workers=8, persistent_workers=True, pin_memory=True)"
    assert unmeasured[0].startswith("verified fix for sync_stall: not tried: removing a per-step .item()")
    assert unmeasured[1] == ("verified fix for precision (bf16_autocast): not tried, --try runs 3 experiments "
                             "at most")
    assert len(unmeasured) == 2  # the low finding gets no line
    assert [e.name for e in plan_for("precision", {"autocast_seen": False}, "cuda:0")] == ["bf16_autocast"]
    assert plan_for("precision", {"autocast_seen": False}) == []  # the CPU: not tried
    assert plan_for("precision", {"float64_ops_per_step": 0.0}, "cuda:0") == []
    assert [e.name for e in plan_for("input_bound", {"loader_workers": 8, "suggested_workers": 8})] == ["replay"]


class Stop(BaseException):
    """Like the doctor's stop: not an Exception, so torch's always-call forward hooks do not run."""


class Stops(nn.Module):
    def forward(self, inputs):
        raise Stop


def test_autocast_covers_the_outermost_forward_and_is_left_even_when_stopped() -> None:
    before = patched_state()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    changes = Changes()
    autocast_forward(changes, "cpu")  # the experiment uses "cuda"; the CPU autocast runs the same hooks here
    try:
        assert model(torch.randn(4, 8)).dtype == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")  # left after the outermost forward, not the first inner one
        with pytest.raises(Stop):
            Stops()(torch.randn(4, 8))
        assert torch.is_autocast_enabled("cpu")  # the post-hook did not run
    finally:
        changes.restore()
    assert patched_state() == before and model(torch.randn(4, 8)).dtype == torch.float32


def test_the_command_prints_and_writes_the_gains(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    status = main(["doctor", "--steps", "5", "--warmup", "2", "--try", "--json", str(target),
                   str(SCRIPTS / "input_bound.py")])
    captured = capsys.readouterr()
    document = json.loads(target.read_text())
    gain = document["findings"][0]["gain"]
    assert status == 0 and document["findings"][0]["kind"] == "input_bound" and gain["measured"] > 1.5
    assert gain["how"].startswith("replayed the first 8 batches") and "5 steps" in gain["how"]
    assert re.search(r"verified: input_bound: [\d.]+x — replayed", captured.out)
    assert not any("not implemented" in line for line in document["unmeasured"])


def test_the_command_does_not_try_fixes_on_a_script_that_raises(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    status = main(["doctor", "--warmup", "0", "--try", "--json", str(target), str(SCRIPTS / "crashes.py")])
    capsys.readouterr()
    document = json.loads(target.read_text())
    assert status == 1 and "verified fixes (--try): not tried, the script raised; fix that first" in \
        document["unmeasured"]
