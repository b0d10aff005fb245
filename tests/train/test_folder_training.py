"""gpufeed train --data FOLDER --val FOLDER: each folder packed on first use into $GPUFEED_CACHE and reused after,
the pack's side from --image-size (or --max-side), bad files named, a one-line error without --image-size, and
--resume refusing a folder whose files changed since the run began."""

import json
import math
import os

import numpy as np
import pytest
from PIL import Image

from gpufeed.cli.main import main
from gpufeed.data.format.header import read_header

COMMON = ["--model", "mlp", "--hidden", "8", "--batch-size", "12", "--device", "cpu", "--precision", "fp32",
          "--image-size", "32"]


@pytest.fixture
def photos(tmp_path, monkeypatch):
    """36 training and 12 validation JPEGs of 3 classes at sizes 40-100 px, a broken file and a note among them;
    the cache in tmp_path."""
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GPUFEED_CACHE_LIMIT", raising=False)
    rng = np.random.default_rng(0)
    for split, count in (("train", 36), ("val", 12)):
        for index in range(count):
            label = index % 3
            height, width = (int(v) for v in rng.integers(40, 101, size=2))
            image = np.zeros((height, width, 3), np.uint8)
            image[..., label] = rng.integers(120, 255, (height, width), dtype=np.uint8)
            folder = tmp_path / split / f"class{label}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{index}.jpg", quality=90)
    (tmp_path / "train" / "class1" / "broken.jpg").write_bytes(b"not a jpeg")
    (tmp_path / "train" / "class2" / "notes.txt").write_text("a note")
    return tmp_path


def _train(photos, capsys, *extra):
    status = main(["train", "--data", str(photos / "train"), "--val", str(photos / "val"), *COMMON, *extra])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_folder_is_packed_once_then_reused(photos, capsys):
    status, out, err = _train(photos, capsys, "--max-steps", "2", "--json", str(photos / "run.json"))
    assert status == 0, err
    cache = photos / "cache"
    packs = sorted(cache.glob("*.gpuf"))
    assert [pack.name.split("-")[0] for pack in packs] == ["train", "val"]
    train_pack = packs[0]
    assert f"{photos / 'train'}: packed 36 images into {train_pack}" in out
    assert "later runs reuse it while the folder's files stay the same" in out
    assert "skipped       2 files:" in out
    assert f"{(photos / 'train' / 'class1' / 'broken.jpg').resolve()}: not a readable image" in out
    assert f"{(photos / 'train' / 'class2' / 'notes.txt').resolve()}: not an image (extension .txt)" in out
    header = read_header(train_pack)
    assert header.count == 36 and header.max_side == math.ceil(32 / 0.875) == 37 and header.encoding == "jpeg"
    document = json.loads((photos / "run.json").read_text())
    assert document["config"]["data"] == str(photos / "train")  # the folder, so a resumed run finds it again
    assert f"{photos / 'train'} (packed: {train_pack})" in document["data_description"]
    written = train_pack.stat().st_mtime_ns

    status, out, err = _train(photos, capsys, "--max-steps", "1")
    assert status == 0, err
    assert f"{photos / 'train'}: reused its pack {train_pack} (unchanged; 36 images, 2 files skipped" in out
    assert "packed 36" not in out and train_pack.stat().st_mtime_ns == written
    assert sorted(cache.glob("*.gpuf")) == packs


def test_max_side_sets_the_side_of_the_pack(photos, capsys):
    status, _, err = _train(photos, capsys, "--max-steps", "1", "--max-side", "48")
    assert status == 0, err
    assert sorted(read_header(pack).max_side for pack in (photos / "cache").glob("*.gpuf")) == [48, 48]


def test_a_folder_without_image_size_is_one_line_naming_it(photos, capsys):
    status = main(["train", "--data", str(photos / "train"), "--device", "cpu"])
    error = capsys.readouterr().err.strip()
    assert status == 2 and len(error.splitlines()) == 1
    assert f"--data {photos / 'train'} is a folder: give --image-size N" in error
    assert not (photos / "cache").exists() or not list((photos / "cache").glob("*.gpuf"))


def test_max_side_without_a_folder_is_refused(photos, capsys):
    main(["pack", str(photos / "val"), str(photos / "val.gpuf"), "--max-side", "40"])
    capsys.readouterr()
    status = main(["train", "--data", str(photos / "val.gpuf"), "--device", "cpu", "--max-side", "40"])
    assert status == 2 and "--max-side sets the side a folder" in capsys.readouterr().err


def test_resume_refuses_a_folder_changed_since_the_run_began(photos, capsys):
    out = str(photos / "run")
    status, _, err = _train(photos, capsys, "--epochs", "1", "--out", out)
    assert status == 0, err
    touched = photos / "train" / "class0" / "0.jpg"
    before = touched.stat()
    os.utime(touched, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    status, _, err = _train(photos, capsys, "--epochs", "2", "--out", out, "--resume")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"cannot resume {out}: --data {photos / 'train'} changed since the run began" in err
    assert len(list((photos / "cache").glob("train-*.gpuf"))) == 1  # refused before packing anything

    os.utime(touched, ns=(before.st_atime_ns, before.st_mtime_ns))  # the folder as the run began
    status, printed, err = _train(photos, capsys, "--epochs", "2", "--out", out, "--resume")
    assert status == 0, err
    assert "resumed from" in printed and "reused its pack" in printed
