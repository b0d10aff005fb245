"""The .gpuf layout byte for byte, and every kind of damaged file named with its defect."""

import json
import struct

import numpy as np
import pytest

from gpufeed.data.format.header import read_header
from gpufeed.data.format.layout import MAGIC
from gpufeed.data.format.reader import open_packed
from gpufeed.data.format.verify import verify_checksums
from gpufeed.data.pack.writer import PackWriter
from gpufeed.errors import ConfigError, FormatError


def write(path, images, labels, classes=("a", "b", "c")):
    with PackWriter(path, images.shape[1:], classes, max_count=len(images), source="test") as writer:
        for start in range(0, len(images), 100):
            writer.append(images[start:start + 100], labels[start:start + 100])
    return path


@pytest.fixture
def sample(tmp_path):
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (301, 9, 7, 3), dtype=np.uint8)
    labels = rng.integers(0, 3, 301)
    return write(tmp_path / "s.gpuf", images, labels), images, labels


def test_layout_byte_for_byte(sample):
    path, images, labels = sample
    raw = path.read_bytes()
    assert raw[:8] == MAGIC
    (length,) = struct.unpack("<Q", raw[8:16])
    header = json.loads(raw[16:16 + length])
    assert header["version"] == 1 and header["count"] == 301 and header["shape"] == [9, 7, 3]
    assert header["images_offset"] % 4096 == 0 and header["labels_offset"] % 4096 == 0
    assert all(byte == 0 for byte in raw[16 + length:header["images_offset"]])
    start = header["images_offset"]
    assert raw[start:start + images.nbytes] == images.tobytes()
    assert all(byte == 0 for byte in raw[start + images.nbytes:header["labels_offset"]])
    assert raw[header["labels_offset"]:] == labels.astype("<i8").tobytes()
    assert len(raw) == header["labels_offset"] + 8 * 301
    flat = images.reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(header["mean"], flat.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(header["std"], flat.std(axis=0), atol=1e-5)


def test_round_trip_through_the_reader(sample, tmp_path):
    path, images, labels = sample
    for budget in (0, 10**9):  # memory map, and read into RAM
        dataset = open_packed(path, verify=True, ram_budget_bytes=budget)
        assert dataset.in_ram == (budget > 0)
        assert np.array_equal(np.asarray(dataset.images), images)
        assert np.array_equal(dataset.labels, labels)


def test_truncated_file_says_so_with_byte_counts(sample, tmp_path):
    path, images, _ = sample
    cut = tmp_path / "cut.gpuf"
    raw = path.read_bytes()
    header = read_header(path)
    cut.write_bytes(raw[:header.images_offset + 1000])
    with pytest.raises(FormatError, match=r"truncated \(expected 56889 image bytes .* after 1000 image bytes\)"):
        open_packed(cut)


@pytest.mark.parametrize("damage, words", [
    (lambda raw: b"NOTGPUF!" + raw[8:], "not a gpufeed packed dataset"),
    (lambda raw: raw[:12], "not a gpufeed packed dataset"),
    (lambda raw: raw[:8] + struct.pack("<Q", 10**7) + raw[16:], "truncated or damaged"),
    (lambda raw: raw.replace(b'"version":1', b'"version":9', 1), "version 9"),
    (lambda raw: raw.replace(b'"count":301', b'"count":302', 1), "sizes disagree"),
])
def test_damaged_headers_are_named(sample, tmp_path, damage, words):
    path, _, _ = sample
    bad = tmp_path / "bad.gpuf"
    bad.write_bytes(damage(path.read_bytes()))
    with pytest.raises(FormatError, match=words) as caught:
        open_packed(bad)
    assert str(bad) in str(caught.value) and "\n" not in str(caught.value)


def test_flipped_byte_fails_its_checksum_and_names_the_chunk(sample, tmp_path):
    path, _, _ = sample
    header = read_header(path)
    raw = bytearray(path.read_bytes())
    raw[header.images_offset + 500] ^= 0xFF
    bad = tmp_path / "flip.gpuf"
    bad.write_bytes(bytes(raw))
    read_header(bad)  # the header alone is fine
    with pytest.raises(FormatError, match="checksum mismatch in images chunk 0"):
        verify_checksums(bad)
    assert verify_checksums(path) == header.images_bytes + header.labels_bytes


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(FormatError, match="does not exist"):
        open_packed(tmp_path / "nothing.gpuf")
    with pytest.raises(FormatError, match="is a folder"):
        open_packed(tmp_path)


def test_failed_write_leaves_nothing(tmp_path):
    destination = tmp_path / "x.gpuf"
    with pytest.raises(ConfigError):
        with PackWriter(destination, (4, 4, 3), ["a"], max_count=2) as writer:
            writer.append(np.zeros((2, 4, 4, 3), np.uint8), [0, 0])
            writer.append(np.zeros((1, 4, 4, 3), np.uint8), [0])  # over max_count
    assert not destination.exists()
    assert list(tmp_path.iterdir()) == []
