"""--out DIR holds one run: another is refused, --overwrite replaces it, --resume continues it with its settings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gpufeed.cli.main import main
from gpufeed.errors import ConfigError
from gpufeed.train.checkpoint import capture_rng, find_latest, list_checkpoints, save_checkpoint
from gpufeed.train.config import TrainConfig
from gpufeed.train.loop import train

# 300 built-in images at batch 50: 6 steps an epoch; a checkpoint every 2 steps, the newest 3 kept.
TINY = ["train", "--count", "300", "--model", "mlp", "--hidden", "16", "--batch-size", "50", "--device", "cpu",
        "--precision", "fp32", "--checkpoint-every", "2"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def snapshot(folder: Path) -> dict:
    """Every file under `folder`: its bytes and modification time."""
    return {str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
            for path in sorted(folder.rglob("*")) if path.is_file()}


def small_state() -> dict:
    model = torch.nn.Linear(2, 2)
    return {"format": 1, "model": model.state_dict(), "optimizer": {}, "scaler": None, "rng": capture_rng(),
            "feed": {}, "step": 0, "epoch": 0, "config": {}}


def steps_of(folder: Path) -> list[int]:
    return [step for step, _ in list_checkpoints(folder / "checkpoints")]


def train_tiny(capsys, out: Path, *options: str) -> tuple[int, str, str]:
    status = main([*TINY, "--out", str(out), *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_second_run_in_the_folder_is_refused_and_changes_nothing(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "2")[0] == 0
    before = snapshot(out)
    status, _, error = train_tiny(capsys, out, "--epochs", "1")
    assert status == 2 and error.count("\n") == 1, error
    assert f"error: {out} holds another run (config.json, metrics.jsonl, model.safetensors, summary.json, " \
           "3 checkpoints); continue it with --resume, replace it with --overwrite, or choose another --out" in error
    assert snapshot(out) == before


def test_overwrite_removes_the_old_run_and_keeps_other_files(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "2")[0] == 0
    assert steps_of(out) == [8, 10, 12]
    (out / "notes.txt").write_text("mine")
    (out / "checkpoints" / "README").write_text("also mine")
    assert train_tiny(capsys, out, "--epochs", "1", "--overwrite")[0] == 0
    assert steps_of(out) == [2, 4, 6]  # the old run's 8, 10 and 12 are gone, not kept as "newer"
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [6]
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    assert json.loads((out / "config.json").read_text())["epochs"] == 1
    assert (out / "notes.txt").read_text() == "mine" and (out / "checkpoints" / "README").exists()


def test_a_folder_with_other_files_only_is_not_a_run(tmp_path, capsys):
    out = tmp_path / "a"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert train_tiny(capsys, out, "--epochs", "1", "--max-steps", "2")[0] == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").exists()


def test_resume_refuses_changed_settings_naming_each(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1", "--max-steps", "4")[0] == 0
    before = snapshot(out)
    status, _, error = train_tiny(capsys, out, "--resume", "--batch-size", "64", "--model", "cnn",
                                  "--precision", "fp64", "--max-steps", "6")
    assert status == 2 and error.count("\n") == 1, error
    assert f"cannot resume {out} with other settings: --model cnn (the run has mlp), --batch-size 64 (the run " \
           "has 50), --precision fp64 (the run has fp32); leave these options out" in error
    assert snapshot(out) == before


def test_resume_refuses_other_hidden_sizes_and_data(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1", "--max-steps", "2")[0] == 0
    status, _, error = train_tiny(capsys, out, "--resume", "--hidden", "32", "--count", "600", "--seed", "1")
    assert status == 2 and "--count 600 (the run has 300), --hidden 32 (the run has 16), --seed 1 (the run has 0)" \
        in error, error


def test_options_left_out_or_auto_are_not_changes(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1", "--max-steps", "4")[0] == 0
    # --model (default cnn), --batch-size (default 256) and --hidden left out; auto takes what the run used
    status = main(["train", "--out", str(out), "--resume", "--device", "cpu", "--batch-size", "auto",
                   "--precision", "auto", "--max-steps", "6", "--json", "-"])
    printed, error = capsys.readouterr()
    assert status == 0, error
    summary = json.loads(printed)
    assert summary["steps"] == 6 and summary["steps_this_run"] == 2 and summary["resumed_from"].endswith("04.pt")
    assert (summary["model"], summary["batch_size"], summary["precision"]) == ("mlp", 50, "fp32")
    assert summary["config"]["hidden"] == [16] and summary["config"]["checkpoint_every_steps"] == 2
    assert sorted(summary["config"]["explicit"]) == ["batch_size", "device", "max_steps", "out", "precision",
                                                     "resume"]


def test_epochs_may_grow_and_the_run_continues(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1")[0] == 0
    status, printed, _ = train_tiny(capsys, out, "--resume", "--epochs", "2")
    assert status == 0 and "resumed from" in printed and "after 12 steps" in printed
    assert steps_of(out) == [8, 10, 12]
    logged = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert logged == [6, 12]


def test_a_finished_run_is_already_complete(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "2")[0] == 0
    before = snapshot(out)
    for options in ([], ["--epochs", "1"]):  # epochs shrunk below the steps taken: complete too
        status, printed, _ = train_tiny(capsys, out, "--resume", *options)
        assert status == 0 and "already complete after 12 steps" in printed, printed
        assert "done" not in printed and "throughput" not in printed and "verdict" not in printed
    status, printed, error = train_tiny(capsys, out, "--resume", "--json", "-")
    document = json.loads(printed)
    assert status == 0 and "already complete after 12 steps" in error
    assert document["complete"] is True and document["steps"] == 12 and document["about"]["command"] == "train"
    assert snapshot(out) == before


def test_a_run_stopped_after_its_last_checkpoint_is_finished_on_resume(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1")[0] == 0
    (out / "model.safetensors").unlink()  # as if killed during the evaluation
    status, printed, _ = train_tiny(capsys, out, "--resume")
    assert status == 0 and "after 6 steps" in printed and (out / "model.safetensors").exists()


@pytest.mark.parametrize("prepare", ["missing", "empty", "stopped before its first checkpoint"])
def test_resume_with_nothing_to_resume_says_so_and_trains(tmp_path, capsys, prepare):
    out = tmp_path / "a"
    if prepare != "missing":
        out.mkdir()
    if prepare == "stopped before its first checkpoint":
        (out / "config.json").write_text("{}\n")
        (out / "metrics.jsonl").write_text('{"step": 99}\n')
    status, printed, _ = train_tiny(capsys, out, "--resume", "--epochs", "1")
    assert status == 0 and f"nothing to resume in {out}: starting fresh" in printed, printed
    assert "after 6 steps" in printed and (out / "model.safetensors").exists()
    assert [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [6]


def test_resume_of_a_run_whose_checkpoints_do_not_load_is_refused(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "1")[0] == 0
    for _, path in list_checkpoints(out / "checkpoints"):
        path.write_bytes(b"torn")
    status, _, error = train_tiny(capsys, out, "--resume")
    assert status == 2 and "none of its checkpoints loads" in error and "--overwrite" in error, error


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="give one of them"):
        TrainConfig(out=str(tmp_path), resume=True, overwrite=True)


def test_the_library_refuses_a_second_run_too(tmp_path):
    config = dict(count=300, model="mlp", hidden=(16,), batch_size=50, device="cpu", precision="fp32", epochs=1,
                  max_steps=2, out=str(tmp_path / "a"))
    train(TrainConfig(**config))
    with pytest.raises(ConfigError, match="holds another run"):
        train(TrainConfig(**config | {"max_steps": 3}))
    # without a record of what was set, every value counts as given: a library caller means what it passes
    with pytest.raises(ConfigError, match="--batch-size 64"):
        train(TrainConfig(**config | {"resume": True, "batch_size": 64}))


def test_pruning_keeps_the_newest_written_not_the_highest_steps(tmp_path):
    state = small_state()
    for step in (8, 10, 12):  # an earlier run's, written an hour ago
        path = save_checkpoint(tmp_path, step, state)
        os.utime(path, ns=(0, path.stat().st_mtime_ns - 3600 * 10**9))
    save_checkpoint(tmp_path, 2, state)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [10, 12, 2]
    assert find_latest(tmp_path)[1].name == "checkpoint-000000002.pt"
    for step in (4, 6):
        save_checkpoint(tmp_path, step, state)
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 4, 6]
    assert find_latest(tmp_path)[1].name == "checkpoint-000000006.pt"


def test_overwrite_under_two_ranks(tmp_path, capsys):
    out = tmp_path / "a"
    assert train_tiny(capsys, out, "--epochs", "2")[0] == 0
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
                "gpufeed", *TINY, "--batch-size", "25", "--epochs", "1", "--out", str(out)]
    refused = subprocess.run(torchrun, env=environment, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "holds another run" in refused.stderr
    replaced = subprocess.run([*torchrun, "--overwrite"], env=environment, capture_output=True, text=True,
                              timeout=300)
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert steps_of(out) == [2, 4, 6] and "world size 2" in replaced.stdout
