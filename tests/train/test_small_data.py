"""Small datasets: a batch size the user did not set is lowered so an epoch has at least 20 steps; one the user
set is kept with a warning; the verdict then names the steps, not the hardware."""

import json

from gpufeed.cli.main import main
from gpufeed.train.events import TrainResult, verdict
from gpufeed.train.setup import fit_batch_to_data

FAST = ["--model", "mlp", "--hidden", "8", "--epochs", "1", "--device", "cpu", "--precision", "fp32"]


def test_the_batch_is_lowered_to_the_largest_power_of_two_giving_20_steps():
    # 270 samples: 8 gives 33 steps, 16 would give 16
    batch, note = fit_batch_to_data(256, 270, set_by_user=False)
    assert batch == 8 and "lowered from 256 to 8" in note and "33 steps" in note
    assert fit_batch_to_data(256, 5120, set_by_user=False) == (256, None)  # exactly 20 steps: kept
    assert fit_batch_to_data(64, 10, set_by_user=False) == (  # 20 steps out of reach: as many as there can be
        1, "batch size lowered from 64 to 1 so that an epoch has 10 steps (10 samples); set --batch-size to keep "
           "yours")
    assert fit_batch_to_data(1, 10, set_by_user=False)[1].startswith("an epoch has only 10 steps at batch 1")


def test_a_batch_the_user_set_is_kept_with_the_number_of_steps():
    batch, note = fit_batch_to_data(256, 270, set_by_user=True)
    assert batch == 256 and note.startswith("an epoch has only 1 step at batch 256 (270 samples)")


def test_270_images_at_the_default_batch_train_with_a_lowered_batch(capsys):
    capsys.readouterr()
    assert main(["train", "--count", "270", *FAST]) == 0
    out = capsys.readouterr().out
    assert "note: batch size lowered from 256 to 8 so that an epoch has 33 steps (270 samples)" in out
    assert "epoch 1 " in out or "epoch 1\n" in out  # epochs print 1-based


def test_an_explicit_batch_is_kept_and_the_verdict_names_the_steps(capsys):
    capsys.readouterr()
    assert main(["train", "--count", "270", "--batch-size", "256", *FAST, "--json", "-"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["batch_size"] == 256 and document["steps_per_epoch"] == 1
    assert document["notes"] == ["an epoch has only 1 step at batch 256 (270 samples): too few for the model to "
                                 "learn much; lower --batch-size or add data"]
    assert document["verdict"].startswith("an epoch had only 1 step: too few for the model to learn")
    assert "CPU" not in document["verdict"]


def test_a_run_with_enough_steps_gets_the_usual_verdict():
    fields = dict(validation_accuracy=0.9, validation_loss=0.3, epochs=1, steps=40, steps_this_run=40,
                  samples_per_s=100.0, data_wait_fraction=0.01, device_busy_fraction=None,
                  gpu_utilization_percent=None, peak_memory_bytes=1, device="cpu", precision="fp32", world_size=1,
                  batch_size=8, effective_batch_size=8, learning_rate=1e-3, seconds=1.0, model="mlp", parameters=1,
                  resumed_from=None, out=None, config={}, verdict="", unmeasured=[])
    assert "the CPU's arithmetic is the limit" in verdict(TrainResult(**fields, steps_per_epoch=40))
    assert verdict(TrainResult(**fields, steps_per_epoch=19)).startswith("an epoch had only 19 steps")
