"""Packing: arrays, .npz, built-in and folders, checked against numpy and Pillow references and the raw bytes."""

from __future__ import annotations

import io
import json
import os
import struct

import numpy as np
import pytest
from PIL import Image

from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack.builtin import CLASSES, make_builtin
from gpufeed.data.pack.sources import pack, pack_arrays, pack_builtin, pack_folder, pack_npz
from gpufeed.errors import ConfigError


def leftovers(folder):
    """Temporary files a pack may have left beside its destination."""
    return [path.name for path in folder.iterdir() if ".partial-" in path.name]


# ---- arrays: bit-exact round trip and the byte layout -----------------------------------------------------

SHAPES = [(1, 7, 5, 3), (1000, 7, 5, 3), (1, 13, 11, 1), (1000, 13, 11, 1), (1, 1, 1, 3), (1000, 1, 1, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_pack_arrays_round_trip_and_layout(tmp_path, shape):
    rng = np.random.default_rng(sum(shape))
    images = rng.integers(0, 256, shape, dtype=np.uint8)
    labels = rng.integers(0, 4, shape[0], dtype=np.int64)
    labels[0] = 3  # so the default classes are "0".."3"
    given = images[..., 0] if shape[3] == 1 else images  # (N, H, W) for single-channel
    destination = tmp_path / "a.gpuf"
    result = pack_arrays(given, labels.astype(np.int32), destination)
    assert (result.count, result.shape, result.classes) == (shape[0], shape[1:], ("0", "1", "2", "3"))

    packed = open_packed(destination)
    assert packed.images.shape == shape
    assert np.array_equal(packed.images, images)
    assert packed.labels.dtype == np.int64 and np.array_equal(packed.labels, labels)

    raw = np.fromfile(destination, dtype=np.uint8)
    assert raw[:8].tobytes() == b"GPUFEED1"
    (length,) = struct.unpack("<Q", raw[8:16].tobytes())
    header = json.loads(raw[16:16 + length].tobytes().decode("utf-8"))
    images_offset, labels_offset = header["images_offset"], header["labels_offset"]
    count, bytes_per_image = shape[0], int(np.prod(shape[1:]))
    assert images_offset % 4096 == 0 and labels_offset % 4096 == 0
    assert images_offset >= 16 + length and not raw[16 + length:images_offset].any()
    assert raw[images_offset:images_offset + count * bytes_per_image].tobytes() == images.tobytes()
    assert labels_offset >= images_offset + count * bytes_per_image
    assert not raw[images_offset + count * bytes_per_image:labels_offset].any()
    assert raw[labels_offset:].tobytes() == labels.astype("<i8").tobytes()
    assert len(raw) == labels_offset + 8 * count == result.bytes_written
    assert header["count"] == count and header["shape"] == list(shape[1:])


def test_pack_arrays_names_and_progress(tmp_path):
    images = np.zeros((3, 2, 2, 3), np.uint8)
    calls = []
    result = pack_arrays(images, [0, 1, 1], tmp_path / "n.gpuf", classes=["cat", "dog"],
                         progress=lambda done, total: calls.append((done, total)))
    assert result.classes == ("cat", "dog") and open_packed(tmp_path / "n.gpuf").classes == ("cat", "dog")
    assert calls[-1] == (3, 3)


@pytest.mark.parametrize("images, labels, classes, words", [
    (np.zeros((2, 4, 4, 3), np.float32), [0, 1], None, "uint8"),
    (np.zeros((2, 4), np.uint8), [0, 1], None, "shape"),
    (np.zeros((2, 4, 4, 3), np.uint8), [0], None, "labels must be N=2"),
    (np.zeros((2, 4, 4, 3), np.uint8), [0.0, 1.0], None, "integers"),
    (np.zeros((2, 4, 4, 3), np.uint8), [0, -1], None, "0..0"),
    (np.zeros((2, 4, 4, 3), np.uint8), [0, 2], ["a", "b"], "0..1"),
    (np.zeros((0, 4, 4, 3), np.uint8), np.zeros(0, np.int64), None, "no samples"),
])
def test_pack_arrays_rejects_bad_input(tmp_path, images, labels, classes, words):
    with pytest.raises(ConfigError, match=words):
        pack_arrays(images, np.asarray(labels), tmp_path / "bad.gpuf", classes=classes)
    assert not (tmp_path / "bad.gpuf").exists() and not leftovers(tmp_path)


def test_destination_must_end_in_gpuf(tmp_path):
    with pytest.raises(ConfigError, match=r"name it .*data\.gpuf"):
        pack_arrays(np.zeros((1, 2, 2, 3), np.uint8), [0], tmp_path / "data.bin")
    (tmp_path / "dir.gpuf").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        pack_arrays(np.zeros((1, 2, 2, 3), np.uint8), [0], tmp_path / "dir.gpuf")


# ---- npz ---------------------------------------------------------------------------------------------------

def test_npz_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (20, 9, 6), dtype=np.uint8)
    labels = rng.integers(0, 3, 20).astype(np.uint8)
    np.savez(tmp_path / "d.npz", x=images, y=labels, classes=np.array(["a", "b", "c"]))
    result = pack(tmp_path / "d.npz", tmp_path / "d.gpuf")
    packed = open_packed(tmp_path / "d.gpuf")
    assert np.array_equal(packed.images[..., 0], images) and np.array_equal(packed.labels, labels)
    assert result.classes == ("a", "b", "c") and result.shape == (9, 6, 1)


@pytest.mark.parametrize("content, words", [
    ({"x": np.zeros((2, 3, 3), np.uint8)}, r"no array 'y' .*np\.savez"),
    ({"x": np.zeros((2, 3, 3), np.float64), "y": np.zeros(2, np.int64)}, "uint8"),
    ({"x": np.zeros((2, 3, 3), np.uint8), "y": np.zeros((2, 2), np.int64)}, "labels must be"),
    ({"x": np.array([object(), None], dtype=object), "y": np.zeros(2, np.int64)}, "Python objects"),
])
def test_npz_errors_name_the_file_and_the_fix(tmp_path, content, words):
    path = tmp_path / "bad.npz"
    np.savez(path, **content)
    with pytest.raises(ConfigError, match=words) as caught:
        pack_npz(path, tmp_path / "out.gpuf")
    assert "bad.npz" in str(caught.value)
    assert not (tmp_path / "out.gpuf").exists()


def test_npz_that_is_not_an_archive(tmp_path):
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ConfigError, match="text.npz is not a readable .npz"):
        pack_npz(tmp_path / "text.npz", tmp_path / "out.gpuf")
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(ConfigError, match="single array"):
        pack_npz(tmp_path / "one.npy", tmp_path / "out.gpuf")


# ---- built-in ----------------------------------------------------------------------------------------------

def test_builtin_matches_make_builtin(tmp_path):
    calls = []
    result = pack_builtin(tmp_path / "b.gpuf", count=300, seed=3, progress=lambda d, t: calls.append((d, t)))
    images, labels = make_builtin(300, "train", seed=3)
    packed = open_packed(tmp_path / "b.gpuf")
    assert np.array_equal(packed.images, images) and np.array_equal(packed.labels, labels)
    assert result.classes == CLASSES and packed.classes == CLASSES and calls[-1] == (300, 300)

    pack("builtin:test", tmp_path / "t.gpuf", count=50)
    assert np.array_equal(open_packed(tmp_path / "t.gpuf").images, make_builtin(50, "test")[0])


def test_pack_dispatch_errors(tmp_path):
    with pytest.raises(ConfigError, match="disagree"):
        pack("builtin:test", tmp_path / "x.gpuf", split="train")
    with pytest.raises(ConfigError, match="size does not apply"):
        pack("builtin", tmp_path / "x.gpuf", size=(4, 4))
    with pytest.raises(ConfigError, match="at least 1"):
        pack("builtin", tmp_path / "x.gpuf", count=0)
    with pytest.raises(ConfigError, match="does not exist; SRC may be"):
        pack(tmp_path / "missing", tmp_path / "x.gpuf")
    (tmp_path / "file.csv").write_text("a,b")
    with pytest.raises(ConfigError, match="neither a folder nor a .npz"):
        pack(tmp_path / "file.csv", tmp_path / "x.gpuf")
    assert not (tmp_path / "x.gpuf").exists()


# ---- folders -----------------------------------------------------------------------------------------------

def sixteen_bit_values(height=6, width=9):
    """uint16 values that cover the extremes and the rounding boundaries of v / 257."""
    values = np.linspace(0, 65535, height * width).astype(np.uint16).reshape(height, width)
    values.flat[:6] = [0, 128, 129, 65535, 257 * 100 + 128, 257 * 100 + 129]
    return values


def build_mode_folder(root):
    """One class folder with lossless images of known content in many modes, all 6x9 (H x W)."""
    rng = np.random.default_rng(7)
    folder = root / "modes"
    folder.mkdir(parents=True)
    rgb = rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)
    grey = rng.integers(0, 256, (6, 9), dtype=np.uint8)
    Image.fromarray(rgb).save(folder / "a_rgb.png")
    Image.fromarray(rgb).save(folder / "b_rgb.bmp")
    Image.fromarray(rgb).save(folder / "c_rgb.tif")
    Image.fromarray(rgb).save(folder / "d_rgb.webp", lossless=True)
    Image.fromarray(grey).save(folder / "e_l.png")
    palette = Image.fromarray(rng.integers(0, 5, (6, 9), dtype=np.uint8), "P")
    palette.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 200, 100, 50])
    palette.save(folder / "f_p.png")
    Image.fromarray(rng.integers(0, 256, (6, 9, 4), dtype=np.uint8), "RGBA").save(folder / "g_rgba.png")
    Image.fromarray(rng.integers(0, 256, (6, 9, 2), dtype=np.uint8), "LA").save(folder / "h_la.png")
    Image.fromarray(sixteen_bit_values()).save(folder / "i_16.png")
    Image.fromarray(rng.random((6, 9)) > 0.5).save(folder / "j_1.png")
    Image.fromarray(sixteen_bit_values()).save(folder / "k_16.tif")
    return folder


def pillow_reference(path, mode):
    """What the pack should hold for `path`: Pillow's own convert, or round(v / 257) for 16-bit files."""
    with Image.open(path) as image:
        if image.mode.startswith("I;16"):
            values = np.rint(np.asarray(image).astype(np.float64) / 257).astype(np.uint8)
            return np.repeat(values[..., None], 3 if mode == "RGB" else 1, axis=2)
        converted = np.asarray(image.convert(mode))
    return converted if converted.ndim == 3 else converted[..., None]


@pytest.mark.parametrize("channels, mode", [(3, "RGB"), (1, "L")])
def test_folder_modes_match_pillow_convert(tmp_path, channels, mode):
    folder = build_mode_folder(tmp_path / "src")
    result = pack_folder(tmp_path / "src", tmp_path / "m.gpuf", channels=channels, workers=0)
    files = sorted(folder.iterdir())
    packed = open_packed(tmp_path / "m.gpuf")
    assert result.count == len(files) and result.shape == (6, 9, channels) and result.classes == ("modes",)
    for index, path in enumerate(files):
        assert np.array_equal(packed.images[index], pillow_reference(path, mode)), path.name
    assert result.converted == (len(files) - 4 if channels == 3 else len(files) - 1)
    # the 16-bit scaling by hand: 0, 128, 129, 65535, 257*100+128, 257*100+129 -> 0, 0, 1, 255, 100, 101
    sixteen = files.index(folder / "i_16.png")
    assert list(packed.images[sixteen, 0, :6, 0]) == [0, 0, 1, 255, 100, 101]


def test_folder_pool_matches_in_process(tmp_path):
    build_mode_folder(tmp_path / "src")
    rng = np.random.default_rng(3)
    for name in ("x", "y"):  # a second class, and more files than one chunk
        (tmp_path / "src" / name).mkdir()
        for index in range(70):
            pixels = rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "src" / name / f"{index}.png")
    in_process = pack_folder(tmp_path / "src", tmp_path / "a.gpuf", workers=0)
    pooled = pack_folder(tmp_path / "src", tmp_path / "b.gpuf", workers=2)
    first, second = open_packed(tmp_path / "a.gpuf"), open_packed(tmp_path / "b.gpuf")
    assert in_process.classes == pooled.classes == ("modes", "x", "y")
    assert np.array_equal(first.images, second.images) and np.array_equal(first.labels, second.labels)
    assert np.bincount(first.labels).tolist() == [11, 70, 70]


def test_gif_first_frame_jpeg_and_exif_orientation(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    frames = [Image.new("RGB", (9, 6), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    frames[0].save(folder / "a.gif", save_all=True, append_images=frames[1:], duration=50, loop=0)
    Image.new("RGB", (9, 6), (0, 128, 0)).save(folder / "b.jpg", quality=95)
    tall = np.random.default_rng(0).integers(0, 256, (9, 6, 3), dtype=np.uint8)  # stored 9 x 6 (H x W)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated a quarter turn clockwise: 6 x 9
    Image.fromarray(tall).save(folder / "c.png", exif=exif)
    result = pack_folder(folder, tmp_path / "g.gpuf", workers=0)
    packed = open_packed(tmp_path / "g.gpuf")
    assert result.shape == (6, 9, 3) and result.count == 3
    assert (packed.images[0] == [255, 0, 0]).all()  # the first frame, not the blue second one
    assert np.abs(packed.images[1].astype(int) - [0, 128, 0]).max() <= 3  # JPEG: close, not exact
    assert np.array_equal(packed.images[2], np.rot90(tall, k=-1))


def test_resize_policy_by_hand(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    wide = np.arange(4 * 8 * 3, dtype=np.uint8).reshape(4, 8, 3)  # H 4, W 8: crop columns 2..5
    tall = np.arange(8 * 4 * 3, dtype=np.uint8).reshape(8, 4, 3)  # H 8, W 4: crop rows 2..5
    odd = np.random.default_rng(1).integers(0, 256, (5, 9, 3), dtype=np.uint8)
    small = np.random.default_rng(2).integers(0, 256, (2, 2, 3), dtype=np.uint8)
    for name, pixels in (("a", wide), ("b", tall), ("c", odd), ("d", small), ("e", wide[:, :4])):
        Image.fromarray(pixels).save(folder / f"{name}.png")
    result = pack_folder(folder, tmp_path / "r.gpuf", size=(4, 4), workers=0)
    images = open_packed(tmp_path / "r.gpuf").images
    assert result.shape == (4, 4, 3) and result.resized == 4  # "e" is already 4 x 4
    assert np.array_equal(images[0], wide[:, 2:6])
    assert np.array_equal(images[1], tall[2:6, :])
    # 5 x 9 to cover 4 x 4: scale max(4/5, 4/9) = 0.8 -> 4 x 7 (9 * 0.8 = 7.2), then columns 1..4
    scaled = np.asarray(Image.fromarray(odd).resize((7, 4), Image.Resampling.BILINEAR))
    assert np.array_equal(images[2], scaled[:, 1:5])
    upscaled = np.asarray(Image.fromarray(small).resize((4, 4), Image.Resampling.BILINEAR))
    assert np.array_equal(images[3], upscaled)
    assert np.array_equal(images[4], wide[:, :4])


def test_mixed_sizes_without_size_name_the_files(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    for name, (height, width) in (("a", (4, 4)), ("b", (4, 4)), ("c", (5, 7)), ("d", (4, 4)), ("e", (3, 3))):
        Image.new("RGB", (width, height)).save(folder / f"{name}.png")
    with pytest.raises(ConfigError) as caught:
        pack_folder(folder, tmp_path / "mixed.gpuf", workers=0)
    message = str(caught.value)
    assert "a.png is 4x4" in message and "c.png is 5x7" in message
    assert "2 of the 5 images differ" in message and "--size H W" in message
    assert not (tmp_path / "mixed.gpuf").exists() and not leftovers(tmp_path)


def build_corrupt_folder(root):
    folder = root / "src" / "cls"
    folder.mkdir(parents=True)
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "PNG")
    for index in range(3):
        Image.fromarray(noise).save(folder / f"good{index}.png")
    (folder / "empty.png").write_bytes(b"")
    (folder / "half.png").write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])
    (folder / "text.jpg").write_text("this is not a JPEG")
    (folder / "notes.txt").write_text("notes")
    (folder / ".DS_Store").write_bytes(b"\0\0")  # hidden: ignored silently
    return root / "src"


def test_corrupt_files_are_skipped_and_named(tmp_path):
    source = build_corrupt_folder(tmp_path)
    result = pack_folder(source, tmp_path / "c.gpuf", workers=0)
    assert result.count == 3
    reasons = {os.path.basename(item.path): item.reason for item in result.skipped}
    assert set(reasons) == {"empty.png", "half.png", "text.jpg", "notes.txt"}
    assert reasons["empty.png"] == "empty file (0 bytes)"
    assert reasons["half.png"].startswith("truncated")
    assert reasons["text.jpg"].startswith("not a readable image")
    assert reasons["notes.txt"] == "not an image (extension .txt)"


def test_strict_stops_at_the_first_bad_file(tmp_path):
    source = build_corrupt_folder(tmp_path)
    (source / "cls" / "notes.txt").unlink()
    with pytest.raises(ConfigError, match=r"empty\.png: empty file"):
        pack_folder(source, tmp_path / "s.gpuf", strict=True, workers=0)
    assert not (tmp_path / "s.gpuf").exists() and not leftovers(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_is_skipped(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    Image.new("RGB", (3, 3)).save(folder / "a.png")
    Image.new("RGB", (3, 3)).save(folder / "b.png")
    (folder / "b.png").chmod(0)
    result = pack_folder(folder, tmp_path / "p.gpuf", workers=0)
    assert result.count == 1 and result.skipped[0].reason == "permission denied"


def test_permission_denied_is_named(tmp_path, monkeypatch):
    """The same as above for a root user (who reads any file): the open fails as it would for others."""
    import gpufeed.data.pack.images as image_files

    folder = tmp_path / "src"
    folder.mkdir()
    Image.new("RGB", (3, 3)).save(folder / "a.png")
    Image.new("RGB", (3, 3)).save(folder / "b.png")
    real_open = image_files.Image.open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("b.png"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(image_files.Image, "open", fake_open)
    result = pack_folder(folder, tmp_path / "p.gpuf", workers=0)
    assert result.count == 1 and result.skipped[0].reason == "permission denied"


def test_folder_layout_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no images"):
        pack_folder(tmp_path / "empty", tmp_path / "e.gpuf")
    mixed = tmp_path / "mixed"
    (mixed / "cat").mkdir(parents=True)
    Image.new("RGB", (3, 3)).save(mixed / "cat" / "a.png")
    Image.new("RGB", (3, 3)).save(mixed / "stray.png")
    with pytest.raises(ConfigError, match=r"directly in it \(stray\.png\).*\(cat\)"):
        pack_folder(mixed, tmp_path / "m.gpuf")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.png").write_bytes(b"")
    with pytest.raises(ConfigError, match="none of the 1 images"):
        pack_folder(bad, tmp_path / "b.gpuf")
    with pytest.raises(ConfigError, match="channels must be 1"):
        pack_folder(mixed / "cat", tmp_path / "c.gpuf", channels=4)
    assert not leftovers(tmp_path) and not list(tmp_path.glob("*.gpuf"))


def test_output_inside_the_folder_is_not_an_input(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    Image.new("RGB", (3, 3)).save(folder / "a.png")
    calls = []
    pack(folder, folder / "out.gpuf", progress=lambda done, total: calls.append((done, total)))
    result = pack(folder, folder / "out.gpuf")  # again: the first output is not listed as skipped
    assert result.count == 1 and result.skipped == [] and calls[-1] == (1, 1)
