"""Format version 2: folders packed at their own sizes (--max-side, --encoding), checked against Pillow and
numpy references, the bytes of the file, damaged samples named, and version-1 files still read."""

from __future__ import annotations

import io
import json
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from gpufeed.data.format.header import read_header
from gpufeed.data.format.reader import open_packed
from gpufeed.data.format.verify import DamagedSamplesError, verify_checksums
from gpufeed.data.pack.builtin import make_builtin
from gpufeed.data.pack.folder import pack_folder
from gpufeed.data.pack.sources import pack, pack_arrays, pack_builtin
from gpufeed.errors import ConfigError, FormatError

MAX_SIDE = 128
BILINEAR = Image.Resampling.BILINEAR


def photo(height, width, seed=0):
    """A photo-like RGB image: smooth gradients and a wave, plus noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    base = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                     128 + 100 * np.sin((x + y) / 17)], axis=-1)
    return np.clip(base + rng.normal(0, 6, (height, width, 3)), 0, 255).astype(np.uint8)


def jpeg_bytes(pixels, **options):
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", **options)
    return buffer.getvalue()


# name: (stored height, width, as the files hold them) -- sizes after --max-side 128 are written out by hand
EXPECTED_SIZES = {
    "a/png_300x200.png": (128, 85),  # s = 128/300: 200 * s = 85.33
    "a/png_64x500.png": (16, 128),  # s = 128/500: 64 * s = 16.38
    "a/png_40x30.png": (40, 30),  # smaller than 128: never scaled up
    "a/jpeg_120x90.jpg": (120, 90),  # passthrough
    "a/jpeg_400x300.jpg": (128, 96),  # s = 128/400: 300 * s = 96 exactly
    "a/progressive_100x60.jpg": (100, 60),  # passthrough
    "b/cmyk_50x70.jpg": (50, 70),
    "b/grey_90x200.png": (58, 128),  # s = 128/200: 90 * s = 57.6
    "b/palette_30x40.png": (30, 40),
    "b/rotated_60x100.jpg": (100, 60),  # stored 60 x 100 (H x W), orientation 6: shown 100 x 60
    "b/sixteen_20x30.png": (20, 30),
}
BAD = {"b/fake.png": "not a readable image", "b/notes.txt": "not an image", "b/truncated.jpg": "truncated"}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos") / "src"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    Image.fromarray(photo(300, 200, 1)).save(root / "a/png_300x200.png")
    Image.fromarray(photo(64, 500, 2)).save(root / "a/png_64x500.png")
    Image.fromarray(photo(40, 30, 3)).save(root / "a/png_40x30.png")
    (root / "a/jpeg_120x90.jpg").write_bytes(jpeg_bytes(photo(120, 90, 4), quality=90))
    (root / "a/jpeg_400x300.jpg").write_bytes(jpeg_bytes(photo(400, 300, 5), quality=92))
    (root / "a/progressive_100x60.jpg").write_bytes(jpeg_bytes(photo(100, 60, 6), quality=85, progressive=True))
    Image.fromarray(photo(50, 70, 7)).convert("CMYK").save(root / "b/cmyk_50x70.jpg", quality=95)
    Image.fromarray(photo(90, 200, 8)[..., 0]).save(root / "b/grey_90x200.png")
    palette = Image.fromarray(photo(30, 40, 9)).convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    palette.save(root / "b/palette_30x40.png")
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated a quarter turn clockwise
    Image.fromarray(photo(60, 100, 10)).save(root / "b/rotated_60x100.jpg", quality=95, exif=exif)
    sixteen = np.linspace(0, 65535, 20 * 30).astype(np.uint16).reshape(20, 30)
    Image.fromarray(sixteen).save(root / "b/sixteen_20x30.png")
    whole = jpeg_bytes(photo(80, 80, 11))
    (root / "b/truncated.jpg").write_bytes(whole[:len(whole) // 2])
    (root / "b/fake.png").write_text("not a PNG")
    (root / "b/notes.txt").write_text("notes")
    return root


@pytest.fixture(scope="module")
def raw_pack(source, tmp_path_factory):
    path = tmp_path_factory.mktemp("raw") / "raw.gpuf"
    return pack_folder(source, path, max_side=MAX_SIDE, encoding="raw", workers=0), open_packed(path)


@pytest.fixture(scope="module")
def jpeg_pack(source, tmp_path_factory):
    path = tmp_path_factory.mktemp("jpeg") / "jpeg.gpuf"
    return pack_folder(source, path, max_side=MAX_SIDE, workers=0), open_packed(path)


def names_of(dataset):
    return [dataset.sample_name(index) for index in range(len(dataset))]


def reference(source, name):
    """What a raw pack should hold for `name`, by Pillow's own calls (and numpy for 16-bit and rotation)."""
    path = source / name
    height, width = EXPECTED_SIZES[name]
    with Image.open(path) as image:
        if image.mode.startswith("I;16"):
            return np.repeat(np.rint(np.asarray(image) / 257).astype(np.uint8)[..., None], 3, axis=2)
        if name.startswith("b/rotated"):
            return np.rot90(np.asarray(image.convert("RGB")), k=-1)
        if image.format == "JPEG" and max(image.size) > MAX_SIDE:  # the DCT-scaled decode, then the same resize
            image.draft(None, (int(np.ceil(image.width * MAX_SIDE / max(image.size))),
                               int(np.ceil(image.height * MAX_SIDE / max(image.size)))))
        converted = image.convert("RGB")
    if converted.size != (width, height):
        converted = converted.resize((width, height), BILINEAR)
    return np.asarray(converted)


def test_sizes_keep_the_aspect_ratio_and_never_grow(raw_pack, jpeg_pack):
    for result, dataset in (raw_pack, jpeg_pack):
        assert result.count == len(EXPECTED_SIZES) and result.shape is None and result.max_shape == (128, 128, 3)
        assert names_of(dataset) == sorted(EXPECTED_SIZES)
        sizes = {name: (int(h), int(w)) for name, h, w in zip(names_of(dataset), dataset.heights, dataset.widths,
                                                               strict=True)}
        assert sizes == EXPECTED_SIZES
        assert dataset.variable and not dataset.is_fixed_size and dataset.images is None
        with pytest.raises(ConfigError, match="different sizes"):
            _ = dataset.shape


def test_raw_pixels_match_pillow(raw_pack, source):
    result, dataset = raw_pack
    assert dataset.encoding == "raw" and result.passthrough == 0
    for index, name in enumerate(names_of(dataset)):
        assert np.array_equal(dataset.sample_array(index), reference(source, name)), name
    # the drafted JPEG against a full decode and the same resize: JPEG's DCT scaling moves a few levels at most
    big = names_of(dataset).index("a/jpeg_400x300.jpg")
    with Image.open(source / "a/jpeg_400x300.jpg") as image:
        full = np.asarray(image.convert("RGB").resize((96, 128), BILINEAR)).astype(int)
    difference = np.abs(dataset.sample_array(big).astype(int) - full)
    assert difference.max() <= 4 and difference.mean() < 1.0


def test_jpeg_passthrough_and_reencoding(jpeg_pack, raw_pack, source):
    result, dataset = jpeg_pack
    _, raw = raw_pack
    names = names_of(dataset)
    assert dataset.encoding == "jpeg" and result.encoding == "jpeg" and result.quality == 90
    assert result.passthrough == 2 and dataset.header.passthrough == 2
    for name in ("a/jpeg_120x90.jpg", "a/progressive_100x60.jpg"):
        assert dataset.sample_bytes(names.index(name)).tobytes() == (source / name).read_bytes()
    for index, name in enumerate(names):
        stored = dataset.sample_bytes(index).tobytes()
        with Image.open(io.BytesIO(stored)) as image:
            assert image.format == "JPEG" and image.mode == "RGB" and image.getexif().get(0x0112) in (None, 1)
            decoded = np.asarray(image).astype(int)
        assert decoded.shape == (*EXPECTED_SIZES[name], 3)
        if name not in ("a/jpeg_120x90.jpg", "a/progressive_100x60.jpg"):  # Pillow's q90 of the raw pack's pixels
            assert stored == jpeg_bytes(raw.sample_array(index), quality=90), name
        assert np.abs(decoded - raw.sample_array(index)).mean() < 10.0, name  # the same picture
    assert len(dataset.sample_bytes(0)) < raw.lengths[0] / 2  # compressed


def test_statistics_are_those_of_the_stored_pixels(raw_pack, jpeg_pack):
    _, raw = raw_pack
    pixels = np.concatenate([raw.sample_array(index).reshape(-1, 3) for index in range(len(raw))]).astype(np.float64)
    np.testing.assert_allclose(raw.mean, pixels.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(raw.std, pixels.std(axis=0), atol=1e-5)
    _, jpeg = jpeg_pack  # the encoder's input, within JPEG's loss of the decoded output
    np.testing.assert_allclose(jpeg.mean, pixels.mean(axis=0), atol=0.5)


def test_bad_files_are_skipped_and_named(raw_pack, source):
    result, _ = raw_pack
    reasons = {os.path.relpath(item.path, source): item.reason for item in result.skipped}
    assert set(reasons) == set(BAD)
    for name, start in BAD.items():
        assert reasons[name].startswith(start), reasons[name]


def test_file_bytes_exactly(raw_pack, source):
    result, dataset = raw_pack
    raw = dataset.path.read_bytes()
    assert raw[:8] == b"GPUFEED1"
    (length,) = struct.unpack("<Q", raw[8:16])
    header = json.loads(raw[16:16 + length])
    count, listed = len(EXPECTED_SIZES), len(EXPECTED_SIZES) + 2  # fake.png and truncated.jpg were listed
    assert header["version"] == 2 and header["count"] == count and header["encoding"] == "raw"
    table_offset, payload_offset = header["table_offset"], header["payload_offset"]
    assert table_offset % 4096 == 0 and header["table_bytes"] == count * 28
    assert payload_offset == -(-(table_offset + listed * 28) // 4096) * 4096
    assert not any(raw[16 + length:table_offset]) and not any(raw[table_offset + count * 28:payload_offset])
    record = np.dtype([("offset", "<u8"), ("length", "<u8"), ("height", "<u4"), ("width", "<u4"), ("crc32", "<u4")])
    records = np.frombuffer(raw[table_offset:table_offset + count * 28], record)
    samples = [reference(source, name) for name in sorted(EXPECTED_SIZES)]
    payload = b"".join(sample.tobytes() for sample in samples)
    assert records["length"].tolist() == [sample.size for sample in samples]
    assert records["offset"].tolist() == np.concatenate([[0], np.cumsum(records["length"])[:-1]]).tolist()
    assert records["crc32"].tolist() == [zlib.crc32(sample.tobytes()) for sample in samples]
    assert header["payload_bytes"] == len(payload) and raw[payload_offset:payload_offset + len(payload)] == payload
    labels_offset, names_offset = header["labels_offset"], header["names_offset"]
    assert labels_offset == -(-(payload_offset + len(payload)) // 4096) * 4096
    expected_labels = [0 if name.startswith("a/") else 1 for name in sorted(EXPECTED_SIZES)]
    assert raw[labels_offset:labels_offset + 8 * count] == np.asarray(expected_labels, "<i8").tobytes()
    assert names_offset == -(-(labels_offset + 8 * count) // 4096) * 4096
    assert json.loads(raw[names_offset:]) == sorted(EXPECTED_SIZES)
    assert len(raw) == names_offset + header["names_bytes"] == result.bytes_written


def test_flipped_byte_names_the_damaged_sample(raw_pack, tmp_path):
    _, dataset = raw_pack
    damaged = tmp_path / "damaged.gpuf"
    raw = bytearray(dataset.path.read_bytes())
    index = names_of(dataset).index("b/grey_90x200.png")
    raw[dataset.header.payload_offset + int(dataset.offsets[index]) + 100] ^= 0x10
    damaged.write_bytes(bytes(raw))
    with pytest.raises(DamagedSamplesError) as caught:
        verify_checksums(damaged)
    assert [(item.index, item.name) for item in caught.value.damaged] == [(index, "b/grey_90x200.png")]
    assert f"sample {index} (b/grey_90x200.png)" in str(caught.value) and "\n" not in str(caught.value)
    open_packed(damaged)  # opening without verify reads the header and table only
    with pytest.raises(DamagedSamplesError):
        open_packed(damaged, verify=True)
    assert verify_checksums(dataset.path) == dataset.header.checked_bytes


def test_damaged_table_fails_its_chunk_checksum(raw_pack, tmp_path):
    _, dataset = raw_pack
    damaged = tmp_path / "table.gpuf"
    raw = bytearray(dataset.path.read_bytes())
    raw[dataset.header.table_offset + 16] ^= 0x01  # sample 0's height
    damaged.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="checksum mismatch in table chunk 0"):
        verify_checksums(damaged)


def test_grey_pack_stores_grey_jpegs_byte_for_byte(tmp_path):
    folder = tmp_path / "grey"
    folder.mkdir()
    grey = photo(70, 90, 12)[..., 1]
    (folder / "a.jpg").write_bytes(jpeg_bytes(grey, quality=90))
    (folder / "b.jpg").write_bytes(jpeg_bytes(photo(70, 90, 13), quality=90))  # RGB: converted, re-encoded
    result = pack_folder(folder, tmp_path / "g.gpuf", max_side=MAX_SIDE, channels=1, workers=0)
    dataset = open_packed(tmp_path / "g.gpuf")
    assert result.passthrough == 1 and dataset.channels == 1 and dataset.max_shape == (70, 90, 1)
    assert dataset.sample_bytes(0).tobytes() == (folder / "a.jpg").read_bytes()
    assert dataset.is_fixed_size and dataset.shape == (70, 90, 1)
    with pytest.raises(ConfigError, match="decode sample_bytes"):
        dataset.sample_array(0)


def test_worker_processes_store_the_same_bytes(source, raw_pack, tmp_path):
    result = pack_folder(source, tmp_path / "pool.gpuf", max_side=MAX_SIDE, encoding="raw", workers=2)
    pooled = open_packed(tmp_path / "pool.gpuf")
    _, in_process = raw_pack
    assert result.count == len(in_process) and len(result.skipped) == len(BAD)
    assert np.array_equal(pooled.payload, in_process.payload) and np.array_equal(pooled.labels, in_process.labels)


def test_an_error_mid_pack_leaves_nothing(source, tmp_path, monkeypatch):
    import gpufeed.data.pack.encode as encode

    real, calls = encode.store_image, []

    def failing(path, options):
        calls.append(path)
        if len(calls) == 5:
            raise RuntimeError("disk on fire")
        return real(path, options)

    monkeypatch.setattr(encode, "store_image", failing)
    with pytest.raises(RuntimeError, match="disk on fire"):
        pack_folder(source, tmp_path / "x.gpuf", max_side=MAX_SIDE, workers=0)
    with pytest.raises(ConfigError, match="notes.txt: not an image"):
        monkeypatch.setattr(encode, "store_image", real)
        pack_folder(source / "b", tmp_path / "x.gpuf", max_side=MAX_SIDE, strict=True, workers=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("options, words", [
    ({"max_side": 64, "size": (32, 32)}, "mutually exclusive"),
    ({"max_side": 0}, "positive whole number"),
    ({"encoding": "png"}, "must be one of raw, jpeg"),
    ({"encoding": "raw", "quality": 80}, "applies to --encoding jpeg"),
    ({"quality": 80}, "applies to JPEG only"),
    ({"max_side": 64, "quality": 101}, "1 to 100"),
])
def test_option_errors(source, tmp_path, options, words):
    with pytest.raises(ConfigError, match=words) as caught:
        pack_folder(source, tmp_path / "x.gpuf", workers=0, **options)
    assert "\n" not in str(caught.value) and not list(tmp_path.iterdir())


def test_fixed_size_jpeg_with_size(source, tmp_path):
    result = pack_folder(source / "a", tmp_path / "s.gpuf", size=(32, 48), encoding="jpeg", workers=0)
    dataset = open_packed(tmp_path / "s.gpuf")
    assert result.shape == (32, 48, 3) and dataset.is_fixed_size and dataset.shape == (32, 48, 3)
    assert dataset.variable and set(dataset.heights.tolist()) == {32} and set(dataset.widths.tolist()) == {48}


def test_arrays_and_builtin_with_an_encoding(tmp_path):
    result = pack_builtin(tmp_path / "b.gpuf", count=40, encoding="raw")
    images, labels = make_builtin(40, "train")
    dataset = open_packed(tmp_path / "b.gpuf")
    assert result.version == 2 and result.shape == (32, 32, 3) and dataset.sample_name(0) is None
    assert all(np.array_equal(dataset.sample_array(i), images[i]) for i in range(40))
    assert np.array_equal(dataset.labels, labels)
    pack_arrays(images, labels, tmp_path / "j.gpuf", encoding="jpeg", quality=95)
    jpeg = open_packed(tmp_path / "j.gpuf", verify=True)
    decoded = np.stack([np.asarray(Image.open(io.BytesIO(jpeg.sample_bytes(i).tobytes()))) for i in range(40)])
    assert decoded.shape == images.shape and np.abs(decoded.astype(int) - images).mean() < 8
    with pytest.raises(ConfigError, match="max_side does not apply"):
        pack("builtin", tmp_path / "x.gpuf", max_side=16)


def test_version_1_answers_the_same_questions(tmp_path):
    images = np.random.default_rng(0).integers(0, 256, (5, 4, 6, 3), dtype=np.uint8)
    pack_arrays(images, [0, 1, 0, 1, 0], tmp_path / "v1.gpuf")
    assert read_header(tmp_path / "v1.gpuf").version == 1
    for budget in (0, 10**9):
        dataset = open_packed(tmp_path / "v1.gpuf", verify=True, ram_budget_bytes=budget)
        assert not dataset.variable and dataset.encoding == "raw" and dataset.channels == 3
        assert dataset.shape == dataset.max_shape == (4, 6, 3) and dataset.is_fixed_size
        assert dataset.heights.tolist() == [4] * 5 and dataset.widths.tolist() == [6] * 5
        assert dataset.offsets.tolist() == [0, 72, 144, 216, 288] and dataset.lengths.tolist() == [72] * 5
        assert np.array_equal(dataset.sample_bytes(3), images[3].ravel())
        assert np.array_equal(dataset.sample_array(3), images[3]) and dataset.sample_name(3) is None
        assert np.array_equal(np.asarray(dataset.images), images)
