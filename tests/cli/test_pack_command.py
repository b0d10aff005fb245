"""`gpufeed pack` and `gpufeed pack --verify`: exit statuses, messages, JSON, and a pack killed midway."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from gpufeed.cli.main import main
from gpufeed.data.format.header import read_header
from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack.sources import pack_builtin


@pytest.fixture()
def packed(tmp_path):
    path = tmp_path / "b.gpuf"
    pack_builtin(path, count=2000)
    return path


def test_pack_builtin_prints_a_summary(tmp_path, capsys):
    assert main(["pack", "builtin", str(tmp_path / "b.gpuf"), "--count", "500", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "packed 500 images" in out and "32 x 32 x 3" in out and "images/s" in out and "size on disk" in out
    assert len(open_packed(tmp_path / "b.gpuf")) == 500


def test_verify_good_file(packed, capsys):
    assert main(["pack", "--verify", str(packed)]) == 0
    assert "OK" in capsys.readouterr().out


def test_verify_json(packed, capsys):
    assert main(["pack", "--verify", str(packed), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["count"] == 2000 and report["shape"] == [32, 32, 3]


def test_verify_flipped_byte_names_the_chunk(packed, capsys):
    header = read_header(packed)
    with open(packed, "r+b") as handle:
        handle.seek(header.images_offset + 12345)
        value = handle.read(1)[0]
        handle.seek(header.images_offset + 12345)
        handle.write(bytes([value ^ 0x01]))
    assert main(["pack", "--verify", str(packed)]) == 2
    assert "checksum mismatch in images chunk 0" in capsys.readouterr().err


def test_verify_flipped_label_names_the_labels(packed, capsys):
    header = read_header(packed)
    with open(packed, "r+b") as handle:
        handle.seek(header.labels_offset + 8)
        handle.write(b"\x07")
    assert main(["pack", "--verify", str(packed)]) == 2
    assert "labels chunk 0" in capsys.readouterr().err


def test_verify_truncated_file(packed, capsys):
    header = read_header(packed)
    os.truncate(packed, header.images_offset + 1000)
    assert main(["pack", "--verify", str(packed)]) == 2
    assert "truncated" in capsys.readouterr().err


def test_verify_foreign_file(tmp_path, capsys):
    (tmp_path / "x.gpuf").write_bytes(b"PK\x03\x04 not ours" * 10)
    assert main(["pack", "--verify", str(tmp_path / "x.gpuf")]) == 2
    assert "not a gpufeed packed dataset" in capsys.readouterr().err


def test_wrong_input_exits_2(tmp_path, capsys):
    assert main(["pack", "builtin", str(tmp_path / "out.bin")]) == 2
    assert "name it" in capsys.readouterr().err
    assert main(["pack", "builtin"]) == 2
    assert "give SRC and OUT" in capsys.readouterr().err
    assert main(["pack", "builtin", str(tmp_path / "a.gpuf"), "--verify", str(tmp_path / "a.gpuf")]) == 2
    assert main(["pack", str(tmp_path / "nothing"), str(tmp_path / "a.gpuf")]) == 2
    assert "SRC may be" in capsys.readouterr().err
    assert main(["pack", "builtin", str(tmp_path / "a.gpuf"), "--size", "8", "8"]) == 2
    assert not list(tmp_path.iterdir())


def make_folder_with_skips(root, bad_count):
    folder = root / "src" / "cls"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for index in range(5):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / f"img{index}.png")
    for index in range(bad_count):
        (folder / f"broken{index:02d}.png").write_bytes(b"")
    return root / "src"


def test_json_to_stdout_lists_every_skipped_file(tmp_path, capsys):
    source = make_folder_with_skips(tmp_path, 25)
    assert main(["pack", str(source), str(tmp_path / "f.gpuf"), "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)  # nothing but JSON on standard output
    assert report["count"] == 5 and report["skipped_count"] == 25 and len(report["skipped"]) == 25
    assert report["skipped"][0] == {"path": str(source / "cls" / "broken00.png"), "reason": "empty file (0 bytes)"}
    assert report["shape"] == [8, 8, 3] and report["classes"] == ["cls"]


def test_summary_names_the_first_20_skipped(tmp_path, capsys):
    source = make_folder_with_skips(tmp_path, 25)
    json_path = tmp_path / "r.json"
    assert main(["pack", str(source), str(tmp_path / "f.gpuf"), "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    assert "skipped       25 files" in out and "broken19.png" in out and "broken20.png" not in out
    assert "... and 5 more" in out
    assert len(json.loads(json_path.read_text())["skipped"]) == 25


def test_strict_exits_2_and_writes_nothing(tmp_path, capsys):
    source = make_folder_with_skips(tmp_path, 1)
    assert main(["pack", str(source), str(tmp_path / "f.gpuf"), "--strict", "--workers", "0"]) == 2
    assert "broken00.png: empty file" in capsys.readouterr().err
    assert not (tmp_path / "f.gpuf").exists()


def partial_files(folder, name):
    return sorted(folder.glob(f".{name}.partial-*"))


def test_killed_pack_leaves_nothing_and_the_next_pack_cleans_up(tmp_path, capsys):
    out = tmp_path / "big.gpuf"
    command = [sys.executable, "-m", "gpufeed", "pack", "builtin", str(out), "--count", "200000"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240  # python and torch start slowly on a loaded machine
        while not partial_files(tmp_path, out.name) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert process.poll() is None, process.stderr.read().decode()
        assert partial_files(tmp_path, out.name) == [tmp_path / f".{out.name}.partial-{process.pid}"]
        time.sleep(0.3)  # let it write some images
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stderr.close()
    assert not out.exists()
    assert partial_files(tmp_path, out.name)  # the killed writer's leftover

    assert main(["pack", "builtin", str(out), "--count", "100"]) == 0
    assert len(open_packed(out, verify=True)) == 100
    assert partial_files(tmp_path, out.name) == []
