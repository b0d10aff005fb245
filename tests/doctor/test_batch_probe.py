"""The small-batch probe (doctor/observe/probe.py) and what small_batch makes of it (findings/kinds/small_batch.py): the
probe leaves the model as it found it (gradients, buffers, RNG: bitwise), repeats the batch's tensors only, is
skipped with a note where it must be; the fixed cost is hand-derived from the probe's times, and the verdict
between small_batch and input_bound from hand-made steps; and end to end, a batch-of-2 MLP whose step is mostly
fixed cost gets the verdict small_batch, not input_bound."""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from observations import by_kind, host, on_cpu, steps
from torch import nn

from gpufeed.doctor.findings.diagnose import diagnose
from gpufeed.doctor.observation import BatchProbe
from gpufeed.doctor.observe import probe
from gpufeed.doctor.observe.inject import run_script
from gpufeed.doctor.observe.watch import Watcher

SCRIPTS = Path(__file__).parent / "scripts"


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 3))


def test_the_probe_leaves_gradients_buffers_and_rng_as_it_found_them():
    torch.manual_seed(0)
    model = _model()
    inputs = torch.randn(4, 8)
    model(inputs).sum().backward()  # gradients and running statistics from a step of the user's
    grads = [p.grad.clone() for p in model.parameters()]
    buffers = [b.clone() for b in model.buffers()]
    rng = torch.get_rng_state()
    captured = probe.capture(model, (inputs,), {}, 4)
    found, note = probe.run(captured)
    assert found is not None and found.batch == 4 and [f for f, _ in found.seconds] == [1, 2, 4]
    assert all(seconds > 0 for _, seconds in found.seconds) and 1 <= found.repeats <= probe.REPEATS
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert all(torch.equal(b, saved) for b, saved in zip(model.buffers(), buffers, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert note.startswith("batch probe: after the watch") and "the fastest of" in note


def test_only_the_batch_s_tensors_are_repeated():
    batch = {"ids": torch.arange(6).reshape(2, 3), "scale": torch.tensor(2.0), "mask": torch.ones(5), "name": "x"}
    repeated = probe.repeated(batch, 2, 4)
    assert repeated["ids"].shape == (8, 3) and torch.equal(repeated["ids"][6:], batch["ids"])
    assert repeated["scale"] is batch["scale"] and repeated["mask"] is batch["mask"] and repeated["name"] == "x"


def test_no_capture_at_32_or_more_and_no_run_without_a_loss_or_over_the_memory_limit(monkeypatch):
    model = _model()
    assert probe.capture(model, (torch.randn(32, 8),), {}, 32) is None
    frozen = nn.Linear(8, 3).requires_grad_(False)
    assert probe.run(probe.capture(frozen, (torch.randn(4, 8),), {}, 4)) == (
        None, "batch probe: not run, the model's outputs hold nothing that requires grad")
    monkeypatch.setattr(probe, "MEMORY_LIMIT", 0.0)  # any use is over the limit
    found, note = probe.run(probe.capture(model, (torch.randn(4, 8),), {}, 4))
    assert found is None and note.startswith("batch probe: not run, the host's RAM is")


def test_per_sample_cost_is_the_slope_or_its_upper_bound():
    grows = BatchProbe(2, ((1, 0.010), (2, 0.012), (4, 0.016)), 5)
    assert grows.slope_resolved and grows.per_sample_s == pytest.approx(0.006 / 6)  # (16 - 10) ms over 3 x 2
    flat = BatchProbe(2, ((1, 0.010), (2, 0.009), (4, 0.008)), 5)
    assert not flat.slope_resolved and flat.per_sample_s == pytest.approx(0.008 / 8)  # the 4x run over 8 samples


def test_small_batch_claims_the_fixed_cost_the_probe_measured():
    # steps of 1 ms, 0.1 ms waiting for data; the model's 0.9 ms per batch of 2, of which the probe says
    # 2 x 0.05 ms grows with the samples: 0.8 ms fixed, 8/9 of the model's part, 0.8 of the step
    seen = on_cpu(steps(20, wall=0.001, wait=0.0001), host(), batch_size=2,
                  probe=BatchProbe(2, ((1, 0.0004), (2, 0.0005), (4, 0.0007)), 5))
    report = diagnose(seen)
    found = by_kind(report)["small_batch"]
    assert found.evidence["per_sample_ms"] == pytest.approx(0.05)
    assert found.evidence["fixed_ms_per_batch"] == pytest.approx(0.8)
    assert found.evidence["fixed_share_of_model"] == pytest.approx(8 / 9)
    assert found.share == pytest.approx(0.8) and found.severity == "high"
    assert report.verdict.primary == "small_batch"  # over the 10% data wait
    assert "about 0.1 ms grows with the samples" in found.fix and "89% of it is fixed cost" in found.fix
    # a model whose time grows with its samples: little fixed cost, no verdict
    linear = dataclasses.replace(seen, probe=BatchProbe(2, ((1, 0.0009), (2, 0.0018), (4, 0.0036)), 5))
    assert by_kind(diagnose(linear))["small_batch"].share == pytest.approx(0.0, abs=1e-9)


def test_a_data_wait_above_the_fixed_cost_is_input_bound_not_small_batch():
    # the other side of the verdict, by hand: steps of 1 ms, 0.6 ms waiting for data, the model's 0.4 ms mostly
    # fixed cost (the probe's 4x batch costs 0.3 ms against 0.25 ms at 1x): 0.6 of the step is data wait, at most
    # 0.4 fixed cost
    seen = on_cpu(steps(20, wall=0.001, wait=0.0006), host(), batch_size=2,
                  probe=BatchProbe(2, ((1, 0.00025), (2, 0.00027), (4, 0.0003)), 5))
    report = diagnose(seen)
    found = by_kind(report)
    assert report.verdict.primary == "input_bound"
    assert found["small_batch"].share < found["input_bound"].share == pytest.approx(0.6)


@pytest.mark.timing
def test_a_batch_of_2_mlp_is_small_batch_not_input_bound(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["mlp_batch2.py"])
    watcher = Watcher(steps=50, warmup=5)
    # on one intra-op thread (conftest.py): with torch's default of one per core, on cores other processes keep
    # busy, the steps of this 2-sample MLP took 10 to 240 ms instead of 2, from run to run; with one, 1.8-1.9 ms
    outcome = run_script(str(SCRIPTS / "mlp_batch2.py"), [], False, watcher, timeout_s=60)
    report = diagnose(watcher.observe())
    assert outcome.problem is None
    found = by_kind(report)
    # the loop waits some of its step for a loader of 2-sample batches, but most of the step is fixed cost: the
    # probe's 4x batch costs far less than 4x the model's time per batch. The margins: the probe is the fastest of
    # its repeats, so (with a step no faster than it) its per-sample cost is at most a sixth of the model's time
    # (the slope over 6 samples, or the 4x time over 8), leaving at least 2/3 of the model's time fixed, against
    # the 0.5 asserted (measured 0.97-0.98). The verdict: small_batch's share 0.35-0.39 against input_bound's
    # 0.13-0.15 measured with both cores kept busy (the shares are of the mean step, which busy cores lengthen)
    assert report.verdict.primary == "small_batch", [(f.kind, f.share) for f in report.findings]
    assert found["small_batch"].evidence["fixed_share_of_model"] > 0.5, found["small_batch"].evidence
    assert any(note.text.startswith("batch probe: after the watch") for note in report.notes)
