"""Real subprocesses: a run killed with SIGKILL and resumed ends bitwise equal to an uninterrupted run; two
gloo ranks under torchrun match one process with the same global batch."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

TRAIN = [sys.executable, "-m", "gpufeed", "train", "--device", "cpu", "--precision", "fp32"]


@pytest.fixture
def environment(tmp_path_factory):
    env = dict(os.environ, GPUFEED_CACHE=str(tmp_path_factory.getbasetemp() / "cache"), OMP_NUM_THREADS="2")
    return env


def run(arguments, env, timeout=300):
    completed = subprocess.run(arguments, env=env, capture_output=True, text=True, timeout=timeout)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed


def assert_same_weights(first: Path, second: Path, tolerance: float = 0.0):
    a, b = load_file(str(first)), load_file(str(second))
    assert a.keys() == b.keys()
    for name in a:
        if tolerance == 0.0:
            assert torch.equal(a[name], b[name]), f"{name} differs"
        else:
            torch.testing.assert_close(a[name], b[name], atol=tolerance, rtol=tolerance, msg=name)


def test_sigkill_then_resume_is_bitwise_equal(tmp_path, environment):
    options = ["--count", "640", "--model", "cnn", "--width", "4", "--epochs", "3", "--batch-size", "32",
               "--checkpoint-every", "10", "--seed", "3", "--log-every", "5"]
    run([*TRAIN, *options, "--out", str(tmp_path / "whole")], environment)

    victim = tmp_path / "victim"
    process = subprocess.Popen([*TRAIN, *options, "--out", str(victim)], env=environment,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    target = victim / "checkpoints" / "checkpoint-000000020.pt"
    while not target.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert target.exists(), process.stderr.read().decode()[-2000:]
    assert not (victim / "model.safetensors").exists(), "the run finished before it could be killed"

    resumed = run([*TRAIN, *options, "--out", str(victim), "--resume"], environment)
    assert "resumed from" in resumed.stdout
    assert_same_weights(tmp_path / "whole" / "model.safetensors", victim / "model.safetensors")


def test_a_torn_newest_checkpoint_is_skipped_with_a_warning(tmp_path, environment):
    options = ["--count", "400", "--model", "mlp", "--hidden", "32", "--epochs", "2", "--batch-size", "50",
               "--checkpoint-every", "4"]
    out = tmp_path / "run"
    run([*TRAIN, *options, "--max-steps", "8", "--out", str(out)], environment)
    newest = sorted((out / "checkpoints").glob("checkpoint-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    resumed = run([*TRAIN, *options, "--out", str(out), "--resume"], environment)
    assert "skipped checkpoint" in resumed.stderr and newest.name in resumed.stderr
    assert "resumed from" in resumed.stdout


def test_two_gloo_ranks_match_one_process_with_the_global_batch(tmp_path, environment):
    options = ["--count", "1280", "--model", "mlp", "--hidden", "64", "--epochs", "1", "--seed", "5"]
    run([*TRAIN, *options, "--batch-size", "64", "--out", str(tmp_path / "one")], environment)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                "-m", "gpufeed", "train", "--device", "cpu", "--precision", "fp32"]
    ranks = run([*torchrun, *options, "--batch-size", "32", "--out", str(tmp_path / "two")],
                dict(environment, OMP_NUM_THREADS="1"))
    assert ranks.stdout.count("validation accuracy") == 1, "only rank 0 reports"
    assert "world size 2" in ranks.stdout and "effective batch 64" in ranks.stdout
    assert_same_weights(tmp_path / "one" / "model.safetensors", tmp_path / "two" / "model.safetensors",
                        tolerance=1e-4)
