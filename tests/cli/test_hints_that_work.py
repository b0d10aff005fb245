"""Every error that tells the user what to do gives a command or argument that works on the input at hand, in the
caller's terms (the command line's flags, the library's arguments); each hint here is followed and must work."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import gpufeed
from gpufeed.cli.main import main
from gpufeed.errors import DeviceUnavailable, FormatError


def _photo_folder(root, sizes):
    """Two class subfolders of small PNGs, one size each from `sizes` in turn."""
    generator = np.random.default_rng(0)
    for index, (height, width) in enumerate(sizes):
        folder = root / f"class{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = generator.integers(0, 255, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.png")
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("varied", [True, False])
def test_train_on_a_folder_asks_for_image_size_and_with_it_trains(tmp_path, capsys, cache, varied):
    sizes = [(30 + 7 * (i % 3), 28 + 5 * (i % 4)) for i in range(12)] if varied else [(24, 24)] * 12
    folder = _photo_folder(tmp_path / "photos", sizes)
    assert main(["train", "--data", str(folder), "--device", "cpu"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "gpufeed.pack(" not in error, error
    assert f"--data {folder} is a folder: give --image-size N (e.g. 224)" in error
    # the hint followed (N small to keep the run short), plus how long to train
    assert main(["train", "--data", str(folder), "--image-size", "24", "--device", "cpu", "--model", "mlp",
                 "--hidden", "8", "--batch-size", "4", "--max-steps", "2", "--val-fraction", "0.25"]) == 0, \
        capsys.readouterr().err


def test_feed_on_a_folder_speaks_the_librarys_terms_and_its_hint_works(tmp_path):
    folder = _photo_folder(tmp_path / "photos", [(30 + 7 * (i % 3), 28) for i in range(8)])
    with pytest.raises(FormatError) as raised:
        gpufeed.Feed(folder, 4, device="cpu")
    text = str(raised.value)
    assert "gpufeed.pack(" in text and "--" not in text, text
    out = str(folder) + ".gpuf"
    assert f"gpufeed.pack({str(folder)!r}, {out!r}, max_side=256)" in text
    gpufeed.pack(folder, out, max_side=256)
    assert "augment='random-resized-crop', image_size=224" in text
    images, labels = next(iter(gpufeed.Feed(out, 4, device="cpu", augment="random-resized-crop", image_size=224)))
    assert images.shape == (4, 3, 224, 224) and labels.shape == (4,)


def test_feed_on_a_variable_size_pack_names_the_augment_and_it_works(tmp_path):
    folder = _photo_folder(tmp_path / "photos", [(30 + 7 * (i % 3), 28) for i in range(8)])
    packed = tmp_path / "p.gpuf"
    gpufeed.pack(folder, packed, max_side=256)
    with pytest.raises(gpufeed.ConfigError, match="augment='random-resized-crop'") as raised:
        gpufeed.Feed(packed, 4, device="cpu")
    assert "image_size=224" in str(raised.value) and "--" not in str(raised.value)
    images, _ = next(iter(gpufeed.Feed(packed, 4, device="cpu", augment="random-resized-crop", image_size=224)))
    assert images.shape == (4, 3, 224, 224)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_missing_gpu_in_the_library_names_device_cpu_and_on_the_command_line_the_flag(tmp_path, capsys, cache):
    packed = tmp_path / "b.gpuf"
    gpufeed.pack("builtin", packed, count=64)
    with pytest.raises(DeviceUnavailable) as raised:
        gpufeed.Feed(packed, 8, device="cuda")
    assert 'pass device="cpu"' in str(raised.value) and "--device" not in str(raised.value)
    assert next(iter(gpufeed.Feed(packed, 8, device="cpu")))[0].shape[0] == 8  # the hint, followed
    assert main(["train", "--data", str(packed), "--device", "cuda"]) == 2
    error = capsys.readouterr().err
    assert "use --device cpu" in error and "device=" not in error
