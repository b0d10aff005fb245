"""`gpufeed train --json`'s per_step samples: one entry per optimizer step, on the clock the log intervals read."""

import json

import pytest

from gpufeed.cli.main import main


def test_per_step_lists_cover_the_run_and_count_its_samples(tmp_path):
    # 1000 built-in images at batch 48: 20 steps an epoch (960 samples; the short last batch of 40 is dropped),
    # 3 epochs = 60 steps of 48 samples.
    target = tmp_path / "run.json"
    assert main(["train", "--count", "1000", "--batch-size", "48", "--epochs", "3", "--model", "cnn", "--width", "8",
                 "--device", "cpu", "--precision", "fp32", "--json", str(target)]) == 0
    document = json.loads(target.read_text())
    per_step = document["per_step"]
    assert set(per_step) == {"wall_s", "data_wait_s", "samples"}
    assert document["steps_this_run"] == 60
    assert [len(values) for values in per_step.values()] == [60, 60, 60]
    assert per_step["samples"] == [48] * 60 and sum(per_step["samples"]) == 60 * document["effective_batch_size"]
    assert all(0 <= wait < wall for wall, wait in zip(per_step["wall_s"], per_step["data_wait_s"], strict=True))
    # the walls run end to end from the loop's start to the last step's end: the log intervals' seconds but for the
    # moments each log line takes to write (not `seconds`, which adds the evaluation and the setup: on a busy CI
    # machine they took 7% of a 7.7 s run)
    loop_seconds = document["timeline"][-1]["seconds"]
    assert sum(per_step["wall_s"]) == pytest.approx(loop_seconds, rel=0.02)
    assert sum(per_step["wall_s"]) < document["seconds"]
    # the waits are the log intervals' own (one rank: their share is the total wait over the intervals' seconds)
    assert sum(per_step["data_wait_s"]) / loop_seconds == pytest.approx(document["data_wait_fraction"], rel=1e-9)
