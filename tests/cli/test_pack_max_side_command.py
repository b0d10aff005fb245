"""`gpufeed pack --max-side`, `--encoding` and `--verify` of a version-2 file; `plan` and `train` given one."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from PIL import Image

from gpufeed.cli.main import main
from gpufeed.cli.plan import data_defaults
from gpufeed.data.format.reader import open_packed
from gpufeed.errors import ConfigError


@pytest.fixture()
def photos(tmp_path):
    folder = tmp_path / "src" / "cls"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, (height, width) in {"tall": (90, 30), "wide": (20, 100), "small": (10, 12)}.items():
        Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8)).save(folder / f"{name}.png")
    Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(folder / "photo.jpg", quality=90)
    (folder / "broken.jpg").write_bytes(b"")
    return tmp_path / "src"


def test_json_names_the_encoding_and_every_count(photos, tmp_path, capsys):
    out = tmp_path / "p.gpuf"
    assert main(["pack", str(photos), str(out), "--max-side", "40", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["version"], report["encoding"], report["quality"], report["max_side"]) == (2, "jpeg", 90, 40)
    assert report["count"] == 4 and report["passthrough"] == 1 and report["resized"] == 2
    assert report["shape"] is None and report["max_shape"] == [40, 40, 3]
    assert report["skipped_count"] == 1 and report["skipped"][0]["path"].endswith("broken.jpg")
    assert report["bytes_written"] == out.stat().st_size
    dataset = open_packed(out)
    sizes = sorted(zip(dataset.heights.tolist(), dataset.widths.tolist(), strict=True))
    assert sizes == [(8, 40), (10, 12), (20, 30), (40, 13)]  # 20x100 -> 8x40; 90x30 -> 40x13.3


def test_summary_and_verify(photos, tmp_path, capsys):
    out = tmp_path / "p.gpuf"
    assert main(["pack", str(photos), str(out), "--max-side", "40", "--encoding", "raw"]) == 0
    text = capsys.readouterr().out
    assert "up to 40 x 40 x 3" in text and "encoding      raw; longer side at most 40" in text
    assert main(["pack", "--verify", str(out), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["version"] == 2 and report["encoding"] == "raw" and report["shape"] is None


def test_verify_names_the_damaged_sample(photos, tmp_path, capsys):
    out = tmp_path / "p.gpuf"
    assert main(["pack", str(photos), str(out), "--max-side", "40", "--json", str(tmp_path / "r.json")]) == 0
    dataset = open_packed(out)
    index = [dataset.sample_name(i) for i in range(len(dataset))].index("cls/tall.png")
    with open(out, "r+b") as handle:
        handle.seek(dataset.header.payload_offset + int(dataset.offsets[index]) + 200)
        value = handle.read(1)[0]
        handle.seek(-1, 1)
        handle.write(bytes([value ^ 0x40]))
    capsys.readouterr()
    assert main(["pack", "--verify", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and f"sample {index} (cls/tall.png)" in captured.err
    assert "1 of 4 samples are damaged" in captured.err and captured.out == ""


def test_max_side_and_size_exclude_each_other(photos, tmp_path, capsys):
    assert main(["pack", str(photos), str(tmp_path / "x.gpuf"), "--max-side", "40", "--size", "8", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mutually exclusive" in err and not (tmp_path / "x.gpuf").exists()
    assert main(["pack", "builtin", str(tmp_path / "x.gpuf"), "--max-side", "8"]) == 2
    assert "max_side does not apply" in capsys.readouterr().err


def test_plan_and_train_with_variable_sizes(photos, tmp_path, capsys):
    out = tmp_path / "p.gpuf"
    assert main(["pack", str(photos), str(out), "--max-side", "40", "--json", str(tmp_path / "r.json")]) == 0
    assert main(["plan", "--model", "mlp", "--data", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--image-size N" in err and "up to 40x40" in err
    args = argparse.Namespace(data=str(out), image_size=32, input=None)
    dataset = open_packed(out)
    assert data_defaults(args) == ((3, 32, 32), 1, 4, round(dataset.payload.nbytes / 4))
    from gpufeed.train.inputs import choose_augments, open_training_data

    data = open_training_data(str(out), validation=str(out))
    with pytest.raises(ConfigError, match="give --image-size N") as caught:
        choose_augments(data, None)
    assert "\n" not in str(caught.value)
    assert choose_augments(data, 32).sample_shape == (3, 32, 32)
