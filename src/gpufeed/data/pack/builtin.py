"""The built-in dataset: 32×32 RGB shapes and textures, made on the spot, so gpufeed trains with no download.

Each image shows one large object on a background: a filled shape (circle, square, triangle, cross, ring,
diamond) or a patch of texture (horizontal stripes, vertical stripes, checker, dots) cut to a disk or a
square. The object has high contrast: either a light object (each channel in 0.6..1) on a dark background
(each channel in 0..0.4) or, for a random half of the samples, the negative of that, so every object stands
out by at least 0.2 in every channel while its hue, the background's hue and the polarity vary freely. A
faint brightness ramp and a little pixel noise (standard deviation up to 0.04) are added. The position,
size (radius 8.5 to 13 pixels), small rotation, stripe period and phase, colours, polarity, ramp and noise
are all drawn independently of the class, so the label is in the shape or texture, not in the colour or
the mean brightness; and because the polarity is random, no single pixel template fits a class, so a linear
model stays weak while a small convnet learns the shapes within a few dozen steps. Labels are balanced:
each run of ten consecutive indices holds each class once.

Every sample is a pure function of (seed, split, index). Samples are made in blocks of `BLOCK` with a
counter-based generator (Philox, key = seed, counter words = block index and split), so the train and
test streams never overlap, and any prefix of a larger request equals a smaller request. The bytes are
the same on every run with the same numpy on the same kind of CPU; numpy's float32 sin/cos differ in the
last bit between SIMD paths, so on another machine a rare pixel may differ by one level.

How hard it is, measured with gpufeed's own trainer: `train(TrainConfig(count=N, epochs=E, batch_size=64,
device="cpu", precision="fp32", ...))`, i.e. the `gpufeed train` defaults otherwise (AdamW, the model's
default peak lr: 1e-3 mlp, 2e-3 cnn; weight decay 5e-4, label smoothing 0.1, 5% linear warm-up then linear
decay, crop+flip augmentation), scored on the first N/5 images of the test split; torch 2.13.0+cpu,
numpy 2.4, a 2-core CPU. Where a cell holds several numbers they are training seeds 0, 1, 2 (same data;
the seed sets the initial weights and the shuffling).

| model                     | train images × epochs (steps) | test accuracy       | time  |
|---------------------------|-------------------------------|---------------------|-------|
| linear (`mlp`, hidden ()) | 2,000 × 3 (93)                | 20.5 / 15.0 / 17.8% | ~2 s  |
| linear (`mlp`, hidden ()) | 10,000 × 2 (312)              | 16.4%               | ~3 s  |
| `mlp`, hidden (512, 256)  | 10,000 × 2 (312)              | 40.2 / 41.1%        | ~10 s |
| `cnn`, width 16           | 2,000 × 3 (93)                | 94.5 / 93.0 / 91.5% | ~20 s |
| `cnn`, width 16           | 10,000 × 2 (312)              | 99.8%               | ~35 s |
| `cnn`, default width 32   | 10,000 × 2 (312)              | 99.9%               | ~60 s |

(Chance is 10%. The linear model is near chance because the random polarity flips the sign of any
template; the MLP's hidden units can respond to either polarity, but what one learns at one position does
not carry over to another, as a convolution's does.)
Making 60,000 images takes about 3 s on 2 cores (numpy 2.4).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpufeed.errors import ConfigError

CLASSES = ("circle", "square", "triangle", "cross", "ring", "diamond", "stripes-h", "stripes-v", "checker", "dots")
DEFAULT_TRAIN_COUNT = 50_000
DEFAULT_TEST_COUNT = 10_000
SIZE = 32
BLOCK = 1000  # samples per generator block; a multiple of len(CLASSES), so blocks are exactly balanced
SPLITS = {"train": 0, "test": 1}  # the split's code goes in its own Philox counter word

_FIRST_TEXTURE = CLASSES.index("stripes-h")


def make_builtin(count: int, split: str = "train", seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Return `count` images, uint8 (count, 32, 32, 3) C-contiguous, and their labels, int64 (count,)."""
    _check(count, split, seed)
    images = np.empty((count, SIZE, SIZE, 3), dtype=np.uint8)
    labels = np.empty(count, dtype=np.int64)
    start = 0
    for chunk_images, chunk_labels in builtin_chunks(count, split, seed):
        stop = start + len(chunk_labels)
        images[start:stop] = chunk_images
        labels[start:stop] = chunk_labels
        start = stop
    return images, labels


def builtin_chunks(
    count: int, split: str = "train", seed: int = 0, chunk: int = 4096
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield the samples of `make_builtin(count, split, seed)` in order, `chunk` at a time (the last may be short)."""
    _check(count, split, seed)
    if not isinstance(chunk, (int, np.integer)) or chunk <= 0:
        raise ConfigError(f"chunk must be a positive integer, got {chunk!r}")
    cached_index, cached = -1, None
    for start in range(0, count, chunk):
        stop = min(start + chunk, count)
        parts_images, parts_labels = [], []
        for block_index in range(start // BLOCK, (stop - 1) // BLOCK + 1):
            if block_index != cached_index:
                cached_index, cached = block_index, _make_block(seed, SPLITS[split], block_index)
            low = max(start - block_index * BLOCK, 0)
            high = min(stop - block_index * BLOCK, BLOCK)
            parts_images.append(cached[0][low:high])
            parts_labels.append(cached[1][low:high])
        yield np.concatenate(parts_images), np.concatenate(parts_labels)


def _check(count: int, split: str, seed: int) -> None:
    if not isinstance(count, (int, np.integer)) or count < 0:
        raise ConfigError(f"count must be a non-negative integer, got {count!r}")
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ConfigError(f"seed must be an integer in [0, 2**64), got {seed!r}")


def _make_block(seed: int, split_code: int, block_index: int) -> tuple[np.ndarray, np.ndarray]:
    """Draw and render the `BLOCK` samples of one block; a pure function of its arguments."""
    bit_generator = np.random.Philox(key=int(seed), counter=[0, 0, block_index, split_code])
    random = np.random.Generator(bit_generator)
    # labels: every ten consecutive indices hold a permutation of the ten classes
    labels = np.argsort(random.random((BLOCK // len(CLASSES), len(CLASSES))), axis=1).reshape(-1)
    params = _draw_params(random, BLOCK)
    noise = random.integers(0, 256, (BLOCK, 3, SIZE * SIZE), dtype=np.uint8)  # uniform, cheaper than normal
    images = _render(labels, params, noise)
    return images, labels.astype(np.int64)


def _draw_params(random: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Per-sample geometry, colours and noise level, drawn the same way whatever the class."""
    f32 = np.float32
    radius = random.uniform(8.5, 13.0, n).astype(f32)  # pixels
    margin = radius * 0.6
    # a dark background and a light object, each channel drawn on its own (so the hues vary freely) ...
    background = random.uniform(0.0, 0.4, (n, 3)).astype(f32)
    foreground = random.uniform(0.6, 1.0, (n, 3)).astype(f32)
    # ... and for half the samples, at random, the negative: a light background and a dark object. Every object
    # stands out by at least 0.2 in each channel, but neither polarity nor colour says anything about the class.
    negative = (random.random(n) < 0.5)[:, None]
    background = np.where(negative, np.float32(1.0) - background, background)
    foreground = np.where(negative, np.float32(1.0) - foreground, foreground)
    return {
        "center_x": random.uniform(margin, SIZE - margin).astype(f32),
        "center_y": random.uniform(margin, SIZE - margin).astype(f32),
        "radius": radius,
        "angle": random.uniform(-np.pi / 8, np.pi / 8, n).astype(f32),
        "period": random.uniform(4.5, 7.0, n).astype(f32),  # texture period, pixels
        "phase": random.uniform(0.0, 2 * np.pi, (n, 2)).astype(f32),
        "square_patch": random.random(n) < 0.5,  # texture cut to a square (else a disk)
        "background": background,
        "foreground": foreground,
        "ramp": random.uniform(-0.1, 0.1, (n, 2)).astype(f32),  # brightness change across the image
        "noise": random.uniform(0.0, 0.04, n).astype(f32),
    }


def _render(labels: np.ndarray, params: dict[str, np.ndarray], noise: np.ndarray) -> np.ndarray:
    """Compose background ramp, object and noise (n, 3, 32*32) into uint8 images (n, 32, 32, 3)."""
    n, pixels = len(labels), SIZE * SIZE
    coverage = np.empty((n, SIZE, SIZE), dtype=np.float32)
    for label in range(len(CLASSES)):
        chosen = np.flatnonzero(labels == label)
        if len(chosen):
            coverage[chosen] = _coverage(label, {key: value[chosen] for key, value in params.items()})
    grid = (np.arange(SIZE, dtype=np.float32) + 0.5) / SIZE - 0.5
    ramp = params["ramp"] * np.float32(255.0)
    shade = ramp[:, 0, None, None] * grid[None, None, :] + ramp[:, 1, None, None] * grid[None, :, None]
    # work channels-first with the pixels flattened, so numpy's inner loops run over 1024 values
    images = (params["background"] * np.float32(255.0))[:, :, None] + shade.reshape(n, 1, pixels)
    step = (params["foreground"] * np.float32(255.0))[:, :, None] - images
    step *= coverage.reshape(n, 1, pixels)
    images += step
    # uint8 noise is uniform with standard deviation 73.9; scale it to the sample's level in 0..255 units
    noise_scale = (params["noise"] * np.float32(255.0 / 73.9))[:, None, None]
    step[...] = noise
    step -= np.float32(127.5)
    step *= noise_scale
    images += step
    np.clip(images, 0.0, 255.0, out=images)
    np.rint(images, out=images)
    return np.ascontiguousarray(images.astype(np.uint8).reshape(n, 3, SIZE, SIZE).transpose(0, 2, 3, 1))


def _coverage(label: int, params: dict[str, np.ndarray]) -> np.ndarray:
    """Fraction of each pixel covered by the object, (n, 32, 32) float32 in [0, 1]."""
    pixel = np.arange(SIZE, dtype=np.float32) + 0.5
    radius = params["radius"][:, None, None]
    cos, sin = np.cos(params["angle"])[:, None, None], np.sin(params["angle"])[:, None, None]
    dx = pixel[None, None, :] - params["center_x"][:, None, None]  # (n, 1, 32)
    dy = pixel[None, :, None] - params["center_y"][:, None, None]  # (n, 32, 1)
    u = (dx * cos + dy * sin) / radius  # (n, 32, 32), in units of the radius
    v = (dy * cos - dx * sin) / radius
    if label < _FIRST_TEXTURE:
        return _soft(_shape_distance(CLASSES[label], u, v), radius)
    square = params["square_patch"][:, None, None]
    region = np.where(square, np.maximum(np.abs(u), np.abs(v)) - 0.8, np.hypot(u, v) - 0.95)
    wave = 2 * np.pi * radius / params["period"][:, None, None]  # radians per radius unit
    phase = params["phase"][:, :, None, None]
    a, b = u * wave + phase[:, 0], v * wave + phase[:, 1]
    name = CLASSES[label]
    if name == "stripes-h":
        pattern = np.sin(b)
    elif name == "stripes-v":
        pattern = np.sin(a)
    elif name == "checker":
        pattern = np.sin(a) * np.sin(b) * 2.0
    else:  # dots: bright spots on a square lattice
        pattern = np.cos(a * 0.7) + np.cos(b * 0.7) - 1.0
    return _soft(region, radius) * np.clip(0.5 + 1.5 * pattern, 0.0, 1.0)


def _shape_distance(name: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Approximate signed distance to the shape's edge, in radius units (negative inside)."""
    au, av = np.abs(u), np.abs(v)
    if name == "circle":
        return np.hypot(u, v) - 0.85
    if name == "square":
        return np.maximum(au, av) - 0.72
    if name == "triangle":  # equilateral, pointing up (image rows grow downwards)
        return np.maximum(np.maximum(0.866 * u - 0.5 * v, -0.866 * u - 0.5 * v), v) - 0.5
    if name == "cross":
        return np.minimum(np.maximum(au - 0.95, av - 0.25), np.maximum(av - 0.95, au - 0.25))
    if name == "ring":
        return np.abs(np.hypot(u, v) - 0.72) - 0.2
    if name == "diamond":
        return (au + av - 1.0) * 0.7071
    raise AssertionError(f"no shape named {name}")


def _soft(distance: np.ndarray, radius: np.ndarray) -> np.ndarray:
    """Anti-aliased coverage from a signed distance in radius units: a one-pixel-wide edge."""
    return np.clip(0.5 - distance * radius, 0.0, 1.0)
