"""The GPU-decode path of `Feed`: JPEG bytes cross the bus, decoding, cropping and resizing happen on the device.

Per batch (`Feed(decode="gpu")`, or "auto" on a CUDA device with JPEG samples, a resized-crop augment and
nvImageCodec installed):
1. a staging thread takes the crop boxes (`Feed.crop_boxes`, as the CPU-decode path does) and copies the batch's
   JPEG files back to back into a pinned `ByteSlot`, with the labels and the flip draws (`byte_staging.py`): the
   CPU's whole share;
2. one decode thread, on its own CUDA stream, decodes the batch from the slot with one nvImageCodec call, each
   sample inside its box, into a padded canvas (`decoder.py`), resizes the canvas to `image_size` in one
   batched operation (`resize.py`), copies labels and draws, waits for that stream and hands the slot
   back; at most `DECODE_AHEAD` decoded batches wait on the device;
3. the consumer flips, converts and normalises the uint8 batch on its own stream (`Feed.finish`), as on the
   CPU-decode path.
The decode runs beside the model's step: nvImageCodec releases the GIL, its CPU part (JPEG parsing, and Huffman
decoding on its hybrid backend) runs on its own `workers` threads, and its GPU work on the decode stream.

Not the CPU path's pixels exactly: nvJPEG's IDCT rounds differently from libjpeg-turbo's (within a few levels),
there is no DCT-domain downscaling, and the resize is float (`resize.py`) where the CPU's is uint8
fixed-point; both resizes are Pillow's antialiased BILINEAR.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import numpy as np
import torch

from gpufeed.data.feed.gpu.byte_staging import ByteSlot, initial_capacity, stage_batch_bytes
from gpufeed.data.feed.gpu.decoder import INSTALL_HINT, DecoderUnavailable, DeviceJpegDecoder, open_decoder
from gpufeed.data.feed.gpu.resize import resize_batch
from gpufeed.data.feed.staging import SlotPool, Staging
from gpufeed.errors import ConfigError

DECODE_CHOICES = ("auto", "cpu", "gpu")
DECODE_AHEAD = 2  # decoded batches waiting on the device for the consumer
LARGE_SIDE = 1024  # pixels: a packed side above this gets a note on the padded canvas's memory


@dataclass(frozen=True)
class DecodeChoice:
    """Where `Feed` decodes JPEG samples: `mode` "cpu" (staging threads) or "gpu" (with `decoder`); `notes` are
    one-line remarks for the caller to show."""

    mode: str
    decoder: DeviceJpegDecoder | None = None
    notes: tuple[str, ...] = ()


def choose_decode(decode: str, device: torch.device, dataset, resized, threads: int,
                  opener=open_decoder) -> DecodeChoice:
    """Resolve `Feed(decode=...)`: "cpu"; "gpu" (a `ConfigError` naming the fix when it cannot be had); or "auto":
    "gpu" on a CUDA device for JPEG samples with a resized-crop augment when nvImageCodec decodes there."""
    if decode not in DECODE_CHOICES:
        raise ConfigError(f"decode must be 'auto', 'cpu' or 'gpu', got {decode!r}")
    if decode == "cpu":
        return DecodeChoice("cpu")
    name = dataset.path or "the dataset"
    why_not = None
    if device.type != "cuda":
        why_not = f"it needs a CUDA device, and this feed is on {device}"
    elif dataset.encoding != "jpeg":
        why_not = f"{name} stores {dataset.encoding} samples, not JPEG files"
    elif resized is None:
        why_not = "it needs augment='random-resized-crop' or 'centre-crop'"
    if why_not is not None:
        if decode == "gpu":
            raise ConfigError(f"decode='gpu' cannot be used: {why_not}; use decode='cpu' or 'auto'")
        return DecodeChoice("cpu")
    try:
        decoder = opener(device, dataset.channels, threads)
    except DecoderUnavailable as error:
        if decode == "gpu":
            raise ConfigError(f"decode='gpu' needs nvImageCodec: {error.reason}; {INSTALL_HINT}, or use "
                              f"decode='cpu'") from None
        return DecodeChoice("cpu", notes=(f"JPEG samples are decoded on CPU threads: {error.reason} "
                                          f"({INSTALL_HINT} decodes them on the GPU)",))
    height, width = dataset.max_shape[:2]
    if max(height, width) <= LARGE_SIDE:
        return DecodeChoice("gpu", decoder)
    return DecodeChoice("gpu", decoder, (f"GPU decoding pads each batch to its largest crop (up to {width}x{height} "
                                         f"here, 4 bytes a pixel channel while resizing): pack with --max-side 512 "
                                         f"to bound the device memory it takes",))


def describe_sample(dataset, sample: int) -> str:
    """`data/train.gpuf: sample 13 (cat/001.jpg)`, as the CPU path names a sample."""
    name = dataset.sample_name(sample)
    return f"{dataset.path}: sample {sample}" + (f" ({name})" if name else "")


def decode_slot(feed, decoder: DeviceJpegDecoder, slot: ByteSlot, stream: torch.cuda.Stream | None):
    """Decode and resize the batch in `slot` on `stream` -> (uint8 (B, H, W, C), labels (B,), `Draws` or None)
    on the device; returns once the device has finished with the slot."""
    size, dataset = slot.size, feed.dataset
    samples = slot.samples[:size]
    sizes = np.stack([dataset.heights[samples], dataset.widths[samples]], axis=1)  # (B, 2) as stored
    context = contextlib.nullcontext() if stream is None else torch.cuda.stream(stream)
    with context:
        canvas = decoder.decode_crops([slot.sample_bytes(k) for k in range(size)], slot.boxes[:size], sizes,
                                      lambda k: describe_sample(dataset, int(samples[k])),
                                      0 if stream is None else stream.cuda_stream)
        boxes = torch.from_numpy(slot.boxes[:size])
        images = resize_batch(canvas, boxes[:, 2], boxes[:, 3], feed.resized.size)
        labels = slot.labels[:size].to(feed.device, non_blocking=True, copy=True)  # a copy: the slot is reused
        draws = None if feed.plan is None else slot.draws.head(size).to(feed.device, non_blocking=True)
        if stream is not None:
            done = torch.cuda.Event()
            done.record(stream)
            done.synchronize()  # this thread waits, not the consumer; then the slot may be refilled
    return images, labels, draws


def gpu_decoded_batches(feed, order, epoch: int, decoder: DeviceJpegDecoder):
    """Yield (index, images, labels) from `feed.position` on: finished float batches decoded on the device."""
    cuda = feed.device.type == "cuda"
    stop = threading.Event()
    capacity = initial_capacity(feed.dataset, feed.batch_size)
    pool = SlotPool(lambda: ByteSlot.empty(feed.batch_size, capacity, cuda), feed.prefetch + feed.workers + 1, stop)

    def gather(index: int) -> ByteSlot:
        slot = pool.acquire()
        try:
            return stage_batch_bytes(feed, order, epoch, index, slot)
        except BaseException:
            pool.release(slot)
            raise

    gathering = Staging(gather, feed.position, len(order), feed.workers, feed.prefetch, stop)
    gathered = iter(gathering)
    stream = torch.cuda.Stream(feed.device) if cuda else None

    def decode(index: int):
        got, slot = next(gathered)
        assert got == index, f"gathered batch {got} arrived for batch {index}"
        try:
            return decode_slot(feed, decoder, slot, stream)
        finally:
            pool.release(slot)

    decoding = Staging(decode, feed.position, len(order), 1, DECODE_AHEAD, stop, name="gpufeed-decode")
    try:
        for index, (images, labels, draws) in decoding:
            if cuda:  # made on the decode stream, used on this one: keep the allocator from reusing them early
                consumer = torch.cuda.current_stream(feed.device)
                for made in (images, labels) if draws is None else (images, labels, draws):
                    made.record_stream(consumer)
            yield index, feed.finish(images, draws), labels
    finally:
        decoding.close()
        gathering.close()
