"""fp16 with a gradient scaler on the CPU (`torch.amp.GradScaler("cpu")`, what `Precision("fp16").scaler` makes):
gpufeed train runs it there; a checkpoint written mid-run holds the scaler's state as it was at that step; a run
interrupted and resumed ends bit for bit where the uninterrupted run does, and only because the scaler's state is
restored (a resume that drops it ends elsewhere). The checkpoint functions round-trip a scaler's state on their own.

The scaler is the trainer's, with a larger initial scale and a short growth interval (torch's defaults would keep
2**16 unchanged for 2000 steps, so a resume that lost the scaler would pass unnoticed): the scale then overflows,
halves and doubles every few steps, and which steps are skipped depends on the state a resume restores."""

from __future__ import annotations

import shutil
import signal

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import Interrupted
from gpufeed.train.checkpoint import load_checkpoint, save_checkpoint
from gpufeed.train.config import TrainConfig
from gpufeed.train.events import RunStarted, StepLog
from gpufeed.train.loop import train
from gpufeed.train.step import Precision

# The tests that read `runs` are `slow`: four trainings of 8 steps, 6-9 s together on a busy 2-core CPU.

INITIAL_SCALE, GROWTH_INTERVAL = 2.0 ** 20, 3
STOP_AT = 5  # of 8 steps (320 training samples, batches of 40, one epoch)


class Scalers:
    """`Precision.scaler` for the runs below: the trainer's GradScaler with INITIAL_SCALE and GROWTH_INTERVAL, each one
    kept so that its live state can be read after every step (`on_event`), and, at STOP_AT, SIGINT raised."""

    def __init__(self, stop: bool = False):
        self.made: list[torch.amp.GradScaler] = []
        self.at_start: dict | None = None  # the live scaler's state_dict when the run starts (after a resume's restore)
        self.after_step: dict[int, dict] = {}  # the live scaler's state_dict after each step
        self.started: list[RunStarted] = []
        self.stop = stop

    def make(self, precision: Precision, device_type: str) -> torch.amp.GradScaler | None:
        if not precision.spec.scaled:
            return None
        scaler = torch.amp.GradScaler(device_type, init_scale=INITIAL_SCALE, growth_interval=GROWTH_INTERVAL)
        self.made.append(scaler)
        return scaler

    def on_event(self, event) -> None:
        if isinstance(event, RunStarted):
            self.started.append(event)
            self.at_start = dict(self.made[-1].state_dict())
        if isinstance(event, StepLog):
            self.after_step[event.step] = dict(self.made[-1].state_dict())
            if self.stop and event.step == STOP_AT:
                signal.raise_signal(signal.SIGINT)


def run(config: TrainConfig, scalers: Scalers):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Precision, "scaler", lambda precision, device_type: scalers.make(precision, device_type))
        return train(config, on_event=scalers.on_event)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run, and the same run stopped by SIGINT after step STOP_AT (its checkpoint is the only one)."""
    folder = tmp_path_factory.mktemp("fp16")
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (400, 8, 8, 3), dtype=np.uint8)
    labels = (images.reshape(400, -1).mean(axis=1) > 127.5).astype(np.int64)
    with PackWriter(folder / "data.gpuf", images.shape[1:], ["dark", "light"], len(images)) as writer:
        writer.append(images, labels)
    options = dict(data=str(folder / "data.gpuf"), validation_fraction=0.2, model="mlp", hidden=(16,), epochs=1,
                   batch_size=40, seed=1, precision="fp16", device="cpu", workers=1, log_every_steps=1)
    whole = Scalers()
    whole_result = run(TrainConfig(out=str(folder / "whole"), **options), whole)
    part = Scalers(stop=True)
    with pytest.raises(Interrupted) as stopped:
        run(TrainConfig(out=str(folder / "part"), **options), part)
    assert stopped.value.step == STOP_AT
    return dict(folder=folder, options=options, whole=whole, whole_result=whole_result, part=part,
                checkpoint=folder / "part" / "checkpoints" / f"checkpoint-{STOP_AT:09d}.pt")


def weights(path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def resume_copy(runs, name: str, scalers: Scalers):
    """Resume a copy of the interrupted run's folder (so each test starts from the same checkpoint)."""
    out = runs["folder"] / name
    shutil.copytree(runs["folder"] / "part", out)
    return run(TrainConfig(out=str(out), resume=True, **runs["options"]), scalers), out


@pytest.mark.slow
def test_fp16_trains_on_the_cpu_with_a_scaler_whose_state_moves(runs):
    whole, result = runs["whole"], runs["whole_result"]
    assert [event.precision for event in whole.started] == ["fp16"] and result.precision == "fp16"
    assert len(whole.made) == 1 and result.steps == 8
    scales = [whole.after_step[step]["scale"] for step in range(1, 9)]
    # torch's rules: x0.5 after an overflow (the step skipped), x2 after GROWTH_INTERVAL clean steps
    changes = [after / before for before, after in zip([INITIAL_SCALE, *scales[:-1]], scales, strict=True)]
    assert set(changes) <= {0.5, 1.0, 2.0} and 0.5 in changes and 2.0 in changes  # backed off and grew again
    assert np.isfinite(result.validation_loss)


@pytest.mark.slow
def test_a_checkpoint_written_mid_run_holds_the_scaler_state_of_its_step(runs):
    part, whole = runs["part"], runs["whole"]
    state = load_checkpoint(runs["checkpoint"])
    assert state["step"] == STOP_AT
    assert state["scaler"] == part.after_step[STOP_AT] == whole.after_step[STOP_AT]
    assert state["scaler"]["scale"] != INITIAL_SCALE  # it backed off: a fresh scaler's state would differ
    assert (state["scaler"]["growth_interval"], state["scaler"]["growth_factor"]) == (GROWTH_INTERVAL, 2.0)


@pytest.mark.slow
def test_a_resumed_fp16_run_ends_bitwise_equal_to_the_uninterrupted_one(runs):
    resumed = Scalers()
    result, out = resume_copy(runs, "resumed", resumed)
    assert result.resumed_from.endswith(runs["checkpoint"].name) and result.steps_this_run == 8 - STOP_AT
    assert resumed.at_start == load_checkpoint(runs["checkpoint"])["scaler"]  # restored before the first step
    assert resumed.made[0].state_dict() == runs["whole"].after_step[8]  # the scaler ends where the whole run's did
    assert {step: resumed.after_step[step] for step in range(STOP_AT + 1, 9)} == \
        {step: runs["whole"].after_step[step] for step in range(STOP_AT + 1, 9)}
    expected, got = weights(runs["folder"] / "whole" / "model.safetensors"), weights(out / "model.safetensors")
    assert expected.keys() == got.keys() and all(torch.equal(expected[name], got[name]) for name in expected)


@pytest.mark.slow
def test_a_resume_that_drops_the_scaler_state_ends_elsewhere(runs):
    """The defect the test above guards, planted: the resumed scaler starts fresh at INITIAL_SCALE, so other steps
    overflow and are skipped, and the weights differ from the uninterrupted run's."""
    resumed = Scalers()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.amp.GradScaler, "load_state_dict", lambda self, state: None)
        _, out = resume_copy(runs, "scaler-dropped", resumed)
    assert resumed.at_start["scale"] == INITIAL_SCALE != runs["part"].after_step[STOP_AT]["scale"]
    expected, got = weights(runs["folder"] / "whole" / "model.safetensors"), weights(out / "model.safetensors")
    assert not all(torch.equal(expected[name], got[name]) for name in expected)


@pytest.mark.parametrize("overflow", [False, True])
def test_save_and_load_checkpoint_round_trip_a_cpu_grad_scaler(tmp_path, overflow):
    """The checkpoint functions alone: a CPU GradScaler's state after a clean step (its growth tracker at 1) or an
    overflow (its scale halved to 2**15) is written, loaded with weights_only=True and restored into a fresh one."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=GROWTH_INTERVAL)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(torch.full((3, 4), 1e4 if overflow else 0.01)).float().square().mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    expected_scale, expected_tracker = (2.0 ** 15, 0) if overflow else (2.0 ** 16, 1)
    assert (scaler.get_scale(), scaler.state_dict()["_growth_tracker"]) == (expected_scale, expected_tracker)
    state = {"format": 1, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scaler": scaler.state_dict(), "rng": {"torch": torch.get_rng_state(), "cuda": []},
             "feed": {}, "step": 1, "epoch": 0, "config": {}}
    loaded = load_checkpoint(save_checkpoint(tmp_path, 1, state))
    fresh = torch.amp.GradScaler("cpu")
    fresh.load_state_dict(loaded["scaler"])
    assert fresh.state_dict() == scaler.state_dict()
    assert (fresh.get_scale(), fresh.get_growth_interval()) == (expected_scale, GROWTH_INTERVAL)
