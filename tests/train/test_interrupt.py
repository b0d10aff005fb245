"""Ctrl-C keeps the work: SIGINT or SIGTERM ends the step, writes a checkpoint, says how to continue (exit 130);
the resumed run ends bit for bit where an uninterrupted one does; a second signal stops at once."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from gpufeed.errors import Interrupted
from gpufeed.train.config import TrainConfig
from gpufeed.train.events import StepLog
from gpufeed.train.interrupt import StopSignals
from gpufeed.train.loop import train

OPTIONS = dict(count=600, model="mlp", hidden=(24,), epochs=2, batch_size=40, seed=4, log_every_steps=3,
               device="cpu", precision="fp32", workers=1)


def assert_same_weights(first, second) -> None:
    a, b = load_file(str(first)), load_file(str(second))
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("sent", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_with_a_checkpoint_and_resume_is_bitwise_equal(tmp_path, sent):
    """The signal arrives while step 6 is reported (as from a terminal, in the main thread): the loop ends that
    step, writes checkpoint 6 (no --checkpoint-every: this is the only one) and raises Interrupted."""
    train(TrainConfig(out=str(tmp_path / "whole"), **OPTIONS))

    def signal_at_six(event) -> None:
        if isinstance(event, StepLog) and event.step == 6:
            signal.raise_signal(getattr(signal, sent))

    with pytest.raises(Interrupted) as stopped:
        train(TrainConfig(out=str(tmp_path / "part"), **OPTIONS), on_event=signal_at_six)
    checkpoint = tmp_path / "part" / "checkpoints" / "checkpoint-000000006.pt"
    assert stopped.value.step == 6 and stopped.value.total_steps == 30 and stopped.value.signal_name == sent
    assert stopped.value.checkpoint == str(checkpoint) and stopped.value.exit_status == 130
    assert [path.name for path in checkpoint.parent.iterdir()] == [checkpoint.name]
    assert not (tmp_path / "part" / "model.safetensors").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    result = train(TrainConfig(out=str(tmp_path / "part"), resume=True, **OPTIONS))
    assert result.resumed_from == str(checkpoint) and result.steps == 30 and result.steps_this_run == 24
    assert_same_weights(tmp_path / "whole" / "model.safetensors", tmp_path / "part" / "model.safetensors")


def test_without_an_output_folder_nothing_is_saved_and_it_says_so():
    def signal_at_three(event) -> None:
        if isinstance(event, StepLog) and event.step == 3:
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(Interrupted, match="after step 3 of 30: nothing saved") as stopped:
        train(TrainConfig(**OPTIONS), on_event=signal_at_three)
    assert stopped.value.checkpoint is None


def test_a_second_signal_stops_at_once():
    with StopSignals() as signals:
        signal.raise_signal(signal.SIGTERM)
        assert signals.received == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_ctrl_c_on_the_command_line_prints_the_command_that_continues(tmp_path):
    """A real process and a real SIGINT: exit 130, one line naming the step and the checkpoint, and the command
    it prints, run as printed, finishes the run."""
    env = dict(os.environ, GPUFEED_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "gpufeed", "train", "--count", "1500", "--model", "cnn", "--width", "4",
               "--epochs", "1", "--batch-size", "16", "--device", "cpu", "--precision", "fp32", "--log-every", "2",
               "--out", str(out)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    metrics = out / "metrics.jsonl"
    while (not metrics.exists() or metrics.stat().st_size == 0) and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-2000:]
    line = [text for text in stderr.splitlines() if text.startswith("interrupted: stopped by SIGINT")]
    assert len(line) == 1, stderr[-2000:]
    assert "checkpoint " + str(out / "checkpoints") in line[0]
    continued = line[0].split("continue with: ", 1)[1]
    assert continued.startswith("gpufeed train ") and continued.endswith(" --resume")
    words = shlex.split(continued)[1:]
    resumed = subprocess.run([sys.executable, "-m", "gpufeed", *words], env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0 and "resumed from" in resumed.stdout, resumed.stderr[-2000:]
    assert (out / "model.safetensors").exists()


def test_two_ranks_stop_after_the_same_step_when_one_is_signalled(tmp_path):
    """SIGTERM to rank 1 alone (a scheduler's kill reaching one process first): the ranks' vote stops both after
    one step, rank 0 writes the checkpoint and says so, neither is left in a collective, and the job resumes."""
    import psutil

    env = dict(os.environ, GPUFEED_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
               "gpufeed", "train", "--count", "1000", "--model", "cnn", "--width", "4", "--epochs", "1",
               "--batch-size", "8", "--device", "cpu", "--precision", "fp32", "--log-every", "2", "--out", str(out)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics, deadline = out / "metrics.jsonl", time.monotonic() + 120
    while (not metrics.exists() or metrics.stat().st_size == 0) and process.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    ranks = {child.environ().get("RANK"): child for child in psutil.Process(process.pid).children(recursive=True)}
    ranks["1"].send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    lines = [text for text in stderr.splitlines() if text.startswith("interrupted: ")]
    assert len(lines) == 1 and "stopped by a signal on another rank" in lines[0], stderr[-3000:]
    assert "continue with the same torchrun command and --resume" in lines[0]
    step = int(lines[0].split("after step ", 1)[1].split(" ", 1)[0])
    assert (out / "checkpoints" / f"checkpoint-{step:09d}.pt").exists()
    assert process.returncode == 1  # torchrun's agent: its workers ended with 130, not 0
    resumed = subprocess.run([*command, "--resume"], env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0 and f"checkpoint-{step:09d}.pt" in resumed.stdout, resumed.stderr[-3000:]
