"""The GPU-decode path around the decoder call, on the CPU: byte staging, box -> region, the decoder's handling of
what nvImageCodec returns, the choice of decoder (and the fall-back to CPU threads), and the whole batch flow with
a stand-in for nvImageCodec (`fake_nvimgcodec.py`); the batched resize is in test_gpu_resize.py. Tests that need
nvImageCodec (its CPU backend) or a CUDA GPU skip without them."""

import re
import sys
import threading
import types

import numpy as np
import pytest
import torch
from fake_nvimgcodec import FakeCodec
from photos import photo_dataset, pil_resized_crop, varied_sizes

from gpufeed.data.feed import augment, crops
from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.gpu import decoder as gpu_decoder
from gpufeed.data.feed.gpu.batches import choose_decode, gpu_decoded_batches
from gpufeed.data.feed.gpu.byte_staging import ByteSlot, stage_bytes
from gpufeed.data.feed.gpu.decoder import DecoderUnavailable, DeviceJpegDecoder, box_region, open_decoder
from gpufeed.errors import ConfigError, FormatError

CPU = torch.device("cpu")
CUDA = torch.device("cuda", 0)


def nvimgcodec_or_none():
    try:
        return gpu_decoder.load_nvimgcodec()
    except DecoderUnavailable:
        return None


NVIMGCODEC = nvimgcodec_or_none()
needs_nvimgcodec = pytest.mark.skipif(NVIMGCODEC is None, reason="needs nvImageCodec (pip install 'gpufeed[nvjpeg]')")
needs_cuda_decoder = pytest.mark.skipif(NVIMGCODEC is None or not torch.cuda.is_available(),
                                        reason="needs a CUDA GPU and nvImageCodec")


def raw(batch):
    """normalize=False batches (B, C, H, W) in 0..1 -> uint8 pixels (B, H, W, C) as int64 numpy."""
    return (batch.cpu() * 255).round().to(torch.int64).permute(0, 2, 3, 1).numpy()


def reference_batch(dataset, images, plan, seed, epoch, index, indices, step, start):
    """Pillow crops and BILINEAR resizes of the sampler's boxes, then the flip coins, as numpy (B, H, W, C)."""
    boxes = crops.batch_boxes(plan, dataset.heights[indices], dataset.widths[indices], seed, epoch, index, step, start)
    flips = augment.draw(augment.parse_augment("flip"), step, seed, epoch, index).flips[start:start + len(indices)]
    expected = [pil_resized_crop(images[sample], boxes[k], plan.size) for k, sample in enumerate(indices)]
    return np.stack([e[:, ::-1] if plan.flip and flips[k] else e for k, e in enumerate(expected)]).astype(np.int64)


# -- staging the compressed bytes ------------------------------------------------------------------------------
def test_stage_bytes_puts_the_files_back_to_back_and_grows_the_slot(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "p.gpuf", varied_sizes(12, seed=1), "jpeg")
    slot = ByteSlot.empty(4, capacity=64, pin=False)
    samples = np.array([5, 2, 9, 5])
    stage_bytes(dataset, samples, slot)
    lengths = dataset.lengths[samples]
    assert slot.size == 4 and slot.offsets.tolist() == [0, *np.cumsum(lengths).tolist()]
    assert slot.data.numel() == int(lengths.sum() * 1.25)  # grown from 64 bytes to 1.25x what the batch needed
    for k, sample in enumerate(samples):
        assert slot.sample_bytes(k).tobytes() == dataset.sample_bytes(sample).tobytes()
    grown = slot.data.data_ptr()
    stage_bytes(dataset, samples[1:3], slot)  # fewer bytes: the same buffer
    assert slot.size == 2 and slot.data.data_ptr() == grown
    assert slot.sample_bytes(1).tobytes() == dataset.sample_bytes(9).tobytes()


def test_a_box_becomes_a_region_with_an_exclusive_end():
    assert box_region(FakeCodec(), (3, 5, 10, 20)) == FakeCodec.Region(3, 5, 13, 25)
    if NVIMGCODEC is not None:
        region = box_region(NVIMGCODEC, np.array([3, 5, 10, 20]))
        assert tuple(region.start) == (3, 5) and tuple(region.end) == (13, 25)


# -- the decoder around nvImageCodec ---------------------------------------------------------------------------
def staged(dataset, samples):
    slot = ByteSlot.empty(len(samples), capacity=1 << 16, pin=False)
    stage_bytes(dataset, np.asarray(samples), slot)
    return [slot.sample_bytes(k) for k in range(len(samples))], slot


def sizes_of(dataset, samples):
    return np.stack([dataset.heights[samples], dataset.widths[samples]], axis=1)


def test_one_decoder_call_per_batch_each_sample_cut_to_its_box(tmp_path):
    dataset, images = photo_dataset(tmp_path / "p.gpuf", varied_sizes(6, seed=2), "jpeg")
    codec = FakeCodec()
    decoder = DeviceJpegDecoder(CPU, 3, threads=2, codec=codec)
    samples = [4, 0, 3]
    boxes = np.array([[1, 2, 20, 30], [0, 0, dataset.heights[0], dataset.widths[0]], [5, 7, 33, 11]])
    data, _ = staged(dataset, samples)
    canvas = decoder.decode_crops(data, boxes, sizes_of(dataset, samples), lambda k: f"sample {k}")
    assert canvas.shape == (3, boxes[:, 2].max(), boxes[:, 3].max(), 3)
    for k, (top, left, height, width) in enumerate(boxes):
        assert np.array_equal(canvas[k, :height, :width].numpy(), images[samples[k]][top:top + height,
                                                                                      left:left + width])
    (call,) = codec.calls
    assert [source.region for source in call["sources"]] == [box_region(codec, box) for box in boxes]
    assert call["params"] == dict(apply_exif_orientation=False, color_spec="SRGB")
    (made,) = codec.decoders
    assert made.options["backends"] == ["CPU_ONLY"] and made.options["max_num_cpu_threads"] == 2
    assert made.options["options"] == ":fancy_upsampling=1"


def test_samples_that_do_not_decode_or_disagree_with_the_table_are_format_errors(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "p.gpuf", varied_sizes(4, seed=3), "jpeg")
    decoder = DeviceJpegDecoder(CPU, 3, codec=FakeCodec())
    data, _ = staged(dataset, [1, 2])
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10]])
    sizes = sizes_of(dataset, [1, 2])
    name = lambda k: f"x.gpuf: sample {[1, 2][k]}"  # noqa: E731
    wrong = sizes.copy()
    wrong[1] += 1
    with pytest.raises(FormatError, match=re.escape(f"x.gpuf: sample 2 is a {sizes[1, 1]}x{sizes[1, 0]} JPEG but the "
                                                    f"table says {wrong[1, 1]}x{wrong[1, 0]}; re-run gpufeed pack")):
        decoder.decode_crops(data, boxes, wrong, name)
    garbage = [data[0], np.zeros(100, np.uint8)]
    with pytest.raises(FormatError, match="^x.gpuf: sample 2 does not decode as JPEG"):
        decoder.decode_crops(garbage, boxes, sizes, name)
    decoder.decoder.decode = lambda sources, images, **_: [images[0], None]  # nvImageCodec's for a failed sample
    with pytest.raises(FormatError, match=r"^x.gpuf: sample 2 does not decode as JPEG with nvImageCodec \(it "):
        decoder.decode_crops(data, boxes, sizes, name)


def test_the_probe_reports_a_missing_jpeg_decoder():
    codec = FakeCodec()
    assert open_decoder(CPU, 3, codec=codec).channels == 3 and len(codec.calls) == 1  # the probe decoded
    broken = FakeCodec()
    broken.Decoder = lambda **options: types.SimpleNamespace(decode=lambda sources, **_: [None] * len(sources))
    with pytest.raises(DecoderUnavailable, match=r"could not decode a test JPEG on cpu \(it returned no image; is "
                                                 r"nvJPEG installed\? pip install 'gpufeed\[nvjpeg\]'"):
        open_decoder(CPU, 3, codec=broken)


def test_nvimgcodec_missing_or_too_old_is_unavailable(monkeypatch):
    empty = types.ModuleType("nvidia")
    empty.__path__ = []  # a namespace with no nvimgcodec in it: what an uninstalled package looks like
    monkeypatch.setitem(sys.modules, "nvidia", empty)
    monkeypatch.delitem(sys.modules, "nvidia.nvimgcodec", raising=False)
    with pytest.raises(DecoderUnavailable, match="^nvImageCodec is not installed"):
        gpu_decoder.load_nvimgcodec()
    old = types.ModuleType("nvidia.nvimgcodec")
    old.__version__, old.CodeStream = "0.5.0.13", type("CodeStream", (), {})
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", old)
    monkeypatch.setattr(sys.modules["nvidia"], "nvimgcodec", old, raising=False)
    with pytest.raises(DecoderUnavailable, match="^nvImageCodec 0.5.0.13 is older than 0.7"):
        gpu_decoder.load_nvimgcodec()
    assert gpu_decoder.parse_version("0.9.0.20") == (0, 9, 0, 20) and gpu_decoder.parse_version("0.10.0rc1") == (0, 10)


# -- choosing where to decode ----------------------------------------------------------------------------------
def unavailable(device, channels, threads):
    raise DecoderUnavailable("nvImageCodec is not installed (No module named 'nvidia')")


def test_auto_decodes_on_the_gpu_only_where_it_can(tmp_path):
    jpeg, _ = photo_dataset(tmp_path / "j.gpuf", varied_sizes(4), "jpeg")
    plain, _ = photo_dataset(tmp_path / "r.gpuf", varied_sizes(4), "raw")
    plan = crops.parse_resized_crop("random-resized-crop", 16)
    opened = []
    opener = lambda device, channels, threads: opened.append((device, channels, threads)) or "decoder"  # noqa: E731
    choice = choose_decode("auto", CUDA, jpeg, plan, 3, opener)
    assert (choice.mode, choice.decoder, choice.notes) == ("gpu", "decoder", ()) and opened == [(CUDA, 3, 3)]
    for device, dataset, resized in [(CPU, jpeg, plan), (CUDA, plain, plan), (CUDA, jpeg, None)]:
        assert choose_decode("auto", device, dataset, resized, 3, opener).mode == "cpu"
    assert choose_decode("cpu", CUDA, jpeg, plan, 3, opener).mode == "cpu" and len(opened) == 1
    fallback = choose_decode("auto", CUDA, jpeg, plan, 3, unavailable)
    assert fallback.mode == "cpu" and fallback.notes == (
        "JPEG samples are decoded on CPU threads: nvImageCodec is not installed (No module named 'nvidia') (pip "
        "install 'gpufeed[nvjpeg]' decodes them on the GPU)",)


def test_gpu_decode_that_cannot_be_had_is_a_one_line_config_error(tmp_path):
    jpeg, _ = photo_dataset(tmp_path / "j.gpuf", varied_sizes(4), "jpeg")
    plain, _ = photo_dataset(tmp_path / "r.gpuf", varied_sizes(4), "raw")
    plan = crops.parse_resized_crop("centre-crop", 16)
    with pytest.raises(ConfigError, match=re.escape("decode='gpu' needs nvImageCodec: nvImageCodec is not installed "
                                                    "(No module named 'nvidia'); pip install 'gpufeed[nvjpeg]', or "
                                                    "use decode='cpu'")):
        choose_decode("gpu", CUDA, jpeg, plan, 2, unavailable)
    with pytest.raises(ConfigError, match="stores raw samples, not JPEG files; use decode='cpu' or 'auto'"):
        choose_decode("gpu", CUDA, plain, plan, 2, unavailable)
    with pytest.raises(ConfigError, match="^decode='gpu' cannot be used: it needs a CUDA device, and this feed is on "
                                          "cpu; use decode='cpu' or 'auto'$"):
        Feed(jpeg, 2, device="cpu", augment="centre-crop", image_size=16, decode="gpu")
    with pytest.raises(ConfigError, match="^decode must be 'auto', 'cpu' or 'gpu', got 'nvjpeg'$"):
        Feed(jpeg, 2, device="cpu", augment="centre-crop", image_size=16, decode="nvjpeg")
    feed = Feed(jpeg, 2, device="cpu", augment="centre-crop", image_size=16)
    assert feed.decode == "cpu" and feed.notes == ()


def test_large_photos_get_a_note_on_the_padded_canvas(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "big.gpuf", [(20, 1100), (30, 40)], "jpeg")
    choice = choose_decode("auto", CUDA, dataset, crops.parse_resized_crop("centre-crop", 16), 1, lambda *a: "d")
    assert choice.mode == "gpu" and len(choice.notes) == 1 and "up to 1100x30 here" in choice.notes[0]


# -- the whole batch flow, on the CPU with the stand-in decoder -------------------------------------------------
@pytest.mark.parametrize("augment_name, channels", [("random-resized-crop", 3), ("centre-crop", 1)])
def test_gpu_decoded_batches_equal_the_pillow_reference(tmp_path, augment_name, channels):
    dataset, images = photo_dataset(tmp_path / "p.gpuf", varied_sizes(37, seed=4, low=30, high=160), "jpeg", channels)
    feed = Feed(dataset, 8, device="cpu", seed=3, augment=augment_name, image_size=(24, 32), normalize=False,
                rank=1, world_size=2, workers=2, drop_last=False)
    codec = FakeCodec()
    order = feed.order(epoch=1)
    batches = list(gpu_decoded_batches(feed, order, 1, DeviceJpegDecoder(CPU, channels, codec=codec)))
    assert [index for index, _, _ in batches] == list(range(len(order))) == list(range(len(feed)))
    for index, images_batch, labels in batches:
        indices = order.batches[index]
        assert images_batch.shape == (len(indices), channels, 24, 32)
        assert images_batch.is_contiguous(memory_format=torch.channels_last)
        expected = reference_batch(dataset, images, feed.resized, 3, 1, index, indices, step=16, start=8)
        difference = np.abs(raw(images_batch) - expected)
        assert difference.max() <= 1 and difference.mean() <= 0.3, f"batch {index}"
        assert np.array_equal(labels.numpy(), dataset.labels[indices])
    assert [len(call["sources"]) for call in codec.calls] == [len(batch) for batch in order.batches]


def test_gpu_decoded_batches_resume_at_the_feed_position_and_stop_when_abandoned(tmp_path):
    dataset, _ = photo_dataset(tmp_path / "p.gpuf", varied_sizes(30, seed=5), "jpeg")
    feed = Feed(dataset, 5, device="cpu", seed=2, augment="random-resized-crop", image_size=16, workers=2)
    decoder = DeviceJpegDecoder(CPU, 3, codec=FakeCodec())
    whole = list(gpu_decoded_batches(feed, feed.order(), 0, decoder))
    feed.position = 4
    rest = list(gpu_decoded_batches(feed, feed.order(), 0, decoder))
    assert [index for index, _, _ in rest] == [4, 5]
    for (_, a, la), (_, b, lb) in zip(rest, whole[4:], strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)
    abandoned = gpu_decoded_batches(feed, feed.order(), 0, decoder)
    next(abandoned)
    abandoned.close()  # an abandoned epoch stops both kinds of thread
    assert not [t for t in threading.enumerate() if t.name.startswith(("gpufeed-staging", "gpufeed-decode"))]


def test_an_undecodable_sample_stops_the_flow_with_one_line(tmp_path):
    path = tmp_path / "p.gpuf"
    dataset, _ = photo_dataset(path, varied_sizes(24, seed=6), "jpeg")
    feed = Feed(dataset, 4, device="cpu", augment="centre-crop", image_size=16, workers=2, shuffle=False)
    decoder = DeviceJpegDecoder(CPU, 3, codec=FakeCodec())
    real_decode, damaged = decoder.decoder.decode, dataset.sample_bytes(13).tobytes()

    def decode(sources, **arguments):  # nvImageCodec's answer for a sample it cannot decode: None in its place
        images = real_decode(sources, **arguments)
        return [None if source.data.tobytes() == damaged else image
                for source, image in zip(sources, images, strict=True)]

    decoder.decoder.decode = decode
    with pytest.raises(FormatError, match="^" + re.escape(f"{path}: sample 13 (photo_13.png) does not decode as JPEG "
                                                          f"with nvImageCodec")) as caught:
        list(gpu_decoded_batches(feed, feed.order(), 0, decoder))
    assert "\n" not in str(caught.value)
    alive = [t for t in threading.enumerate() if t.name.startswith(("gpufeed-staging", "gpufeed-decode"))]
    assert not [t for t in alive if t.is_alive()]


# -- with nvImageCodec itself: its CPU backend here, nvJPEG on a GPU ---------------------------------------------
@needs_nvimgcodec
def test_nvimgcodec_cpu_backend_decodes_the_boxes(tmp_path):
    if not hasattr(NVIMGCODEC, "NVIMGCODEC_DEVICE_CPU_ONLY"):
        pytest.skip("this nvImageCodec has no CPU-only device id")
    dataset, images = photo_dataset(tmp_path / "p.gpuf", varied_sizes(20, seed=7), "jpeg")
    feed = Feed(dataset, 6, device="cpu", seed=1, augment="random-resized-crop", image_size=(20, 24), normalize=False)
    order = feed.order()
    for index, batch, _ in gpu_decoded_batches(feed, order, 0, open_decoder(CPU, 3)):
        indices = order.batches[index]
        expected = reference_batch(dataset, images, feed.resized, 1, 0, index, indices, step=6, start=0)
        difference = np.abs(raw(batch) - expected)  # libjpeg-turbo in both, then the resize's level
        assert difference.max() <= 2 and difference.mean() <= 0.3, f"batch {index}"


@needs_cuda_decoder
def test_nvjpeg_decodes_the_boxes_on_the_gpu(tmp_path):
    dataset, images = photo_dataset(tmp_path / "p.gpuf", varied_sizes(12, seed=8, low=60, high=300), "jpeg")
    decoder = open_decoder(CUDA, 3)
    samples = list(range(12))
    boxes = np.stack([np.zeros(12, np.int64) + 3, np.zeros(12, np.int64) + 5, dataset.heights - 10,
                      dataset.widths - 7], axis=1)
    data, _ = staged(dataset, samples)
    canvas = decoder.decode_crops(data, boxes, sizes_of(dataset, samples), str)
    assert canvas.is_cuda
    for k, (top, left, height, width) in enumerate(boxes):
        found = canvas[k, :height, :width].cpu().numpy().astype(np.int64)
        difference = np.abs(found - images[k][top:top + height, left:left + width])
        assert difference.max() <= 6 and difference.mean() <= 1.0, k  # nvImageCodec's own tolerance: 6


@needs_cuda_decoder
@pytest.mark.parametrize("augment_name", ["random-resized-crop", "centre-crop"])
def test_cuda_gpu_decode_matches_the_cpu_decode(tmp_path, augment_name):
    dataset, _ = photo_dataset(tmp_path / "p.gpuf", varied_sizes(40, seed=9, low=60, high=300), "jpeg")
    options = dict(device="cuda", seed=1, augment=augment_name, image_size=(32, 40), workers=2, normalize=False)
    gpu_feed = Feed(dataset, 8, decode="gpu", **options)
    assert gpu_feed.decode == "gpu" and Feed(dataset, 8, **options).decode == "gpu"  # auto picks it
    gpu, cpu = list(gpu_feed), list(Feed(dataset, 8, decode="cpu", **options))
    assert len(gpu) == len(cpu) == 5
    for (a, la), (b, lb) in zip(gpu, cpu, strict=True):
        assert a.is_cuda and a.is_contiguous(memory_format=torch.channels_last) and a.dtype == torch.float32
        difference = np.abs(raw(a) - raw(b))
        assert difference.max() <= 8 and difference.mean() <= 1.0  # nvJPEG's IDCT, then a level of resize
        assert torch.equal(la.cpu(), lb.cpu())
