"""gpufeed train on a photo-style pack (gpufeed pack --max-side: JPEG samples of their own sizes): the ImageNet
recipe chosen by --image-size, a one-line error without it, exact resume and two gloo ranks on the new path."""

import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from test_resume_and_ddp import assert_same_weights, environment, run  # noqa: F401 - a fixture, used by name

from gpufeed.cli.main import main

TRAIN = [sys.executable, "-m", "gpufeed", "train", "--device", "cpu", "--precision", "fp32"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """36 JPEGs of 3 classes at sizes 40-100 px (each class its own hue and stripe direction), packed at max side
    64 as JPEG, and a validation pack of 12 more."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for split, count in (("train", 36), ("val", 12)):
        for index in range(count):
            label = index % 3
            height, width = (int(v) for v in rng.integers(40, 101, size=2))
            rows, columns = np.mgrid[0:height, 0:width]
            stripes = np.sin((rows if label == 0 else columns if label == 1 else rows + columns) / 3.0)
            image = np.zeros((height, width, 3), np.float64)
            image[..., label] = 160 + 90 * stripes
            image += rng.normal(0, 12, image.shape)
            folder = root / split / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(folder / f"{index}.jpg", quality=92)
        assert main(["pack", str(root / split), str(root / f"{split}.gpuf"), "--max-side", "64"]) == 0
    return root


def test_image_size_trains_with_random_resized_crops_and_centre_crop_validation(photos, capsys):
    capsys.readouterr()
    status = main(["train", "--data", str(photos / "train.gpuf"), "--val", str(photos / "val.gpuf"),
                   "--model", "cnn", "--width", "8", "--image-size", "32", "--epochs", "2", "--batch-size", "12",
                   "--device", "cpu", "--precision", "fp32", "--json", "-"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    document = json.loads(captured.out)
    assert document["config"]["image_size"] == 32
    assert document["steps"] == 2 * (36 // 12)
    assert 0.0 <= document["validation_accuracy"] <= 1.0


def test_variable_sizes_without_image_size_is_one_line_naming_it(photos, capsys):
    capsys.readouterr()
    status = main(["train", "--data", str(photos / "train.gpuf"), "--device", "cpu", "--epochs", "1"])
    error = capsys.readouterr().err.strip()
    assert status == 2 and len(error.splitlines()) == 1
    assert "vary in size" in error and "--image-size" in error


def test_image_size_above_the_packed_side_trains_with_a_note(photos, capsys):
    capsys.readouterr()
    status = main(["train", "--data", str(photos / "train.gpuf"), "--val", str(photos / "val.gpuf"),
                   "--model", "mlp", "--hidden", "8", "--image-size", "80", "--max-steps", "1", "--batch-size", "12",
                   "--device", "cpu", "--precision", "fp32"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "note: image_size 80x80 is larger than the largest packed side" in captured.out


class _Stop(Exception):
    pass


def test_resume_on_the_photo_path_is_bitwise_equal(photos, tmp_path):
    """In one process: a whole run; a run stopped by an exception at step 6 (its checkpoint at step 4 written,
    the one at 6 not yet), resumed. The resumed run ends with the whole run's weights, bit for bit."""
    from gpufeed.train.config import TrainConfig
    from gpufeed.train.events import StepLog
    from gpufeed.train.loop import train

    options = dict(data=str(photos / "train.gpuf"), validation_fraction=0.25, model="cnn", width=4, image_size=32,
                   epochs=3, batch_size=9, seed=5, log_every_steps=2, checkpoint_every_steps=2, device="cpu",
                   precision="fp32", workers=1)
    train(TrainConfig(out=str(tmp_path / "whole"), **options))

    def stop_at_six(event) -> None:
        if isinstance(event, StepLog) and event.step == 6:
            raise _Stop

    with pytest.raises(_Stop):
        train(TrainConfig(out=str(tmp_path / "part"), **options), on_event=stop_at_six)
    assert sorted(path.name for path in (tmp_path / "part" / "checkpoints").iterdir())[-1].endswith("04.pt")
    result = train(TrainConfig(out=str(tmp_path / "part"), resume=True, **options))
    assert result.resumed_from and result.steps == 9
    assert_same_weights(tmp_path / "whole" / "model.safetensors", tmp_path / "part" / "model.safetensors")


def test_two_gloo_ranks_equal_one_process_on_the_photo_path(photos, tmp_path, environment):  # noqa: F811
    """An MLP (BatchNorm would see each rank's half batch): the crops of 2 ranks x 6 are those of 1 x 12."""
    options = ["--data", str(photos / "train.gpuf"), "--val", str(photos / "val.gpuf"), "--model", "mlp",
               "--hidden", "16", "--image-size", "32", "--epochs", "2", "--seed", "2", "--log-every", "1"]
    run([*TRAIN, *options, "--batch-size", "12", "--out", str(tmp_path / "one")], environment)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "gpufeed", "train", "--device", "cpu", "--precision", "fp32"]
    completed = subprocess.run([*launcher, *options, "--batch-size", "6", "--out", str(tmp_path / "two")],
                               env=dict(environment, OMP_NUM_THREADS="1"), capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert_same_weights(tmp_path / "one" / "model.safetensors", tmp_path / "two" / "model.safetensors",
                        tolerance=1e-4)
