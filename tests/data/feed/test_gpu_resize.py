"""The batched device resize (`feed/gpu/resize.py`) against independent per-sample references: torch's
antialiased `F.interpolate` in float64 on each crop, and Pillow's BILINEAR."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from photos import pil_resized_crop

from gpufeed.data.feed.gpu.resize import filter_weights, resize_batch


def padded_canvas(sizes, channels=3, fill=255, seed=0):
    generator = torch.Generator().manual_seed(seed)
    height, width = max(h for h, _ in sizes), max(w for _, w in sizes)
    canvas = torch.full((len(sizes), height, width, channels), fill, dtype=torch.uint8)
    pieces = []
    for k, (h, w) in enumerate(sizes):
        piece = torch.randint(0, 256, (h, w, channels), generator=generator, dtype=torch.uint8)
        canvas[k, :h, :w] = piece
        pieces.append(piece)
    return canvas, pieces, torch.tensor([h for h, _ in sizes]), torch.tensor([w for _, w in sizes])


def test_filter_weights_rows_sum_to_one_inside_each_crop():
    weights = filter_weights(torch.tensor([7, 30, 3]), 30, 10)
    assert weights.shape == (3, 10, 30)
    torch.testing.assert_close(weights.sum(dim=2), torch.ones(3, 10))
    assert (weights[0, :, 7:] == 0).all() and (weights[2, :, 3:] == 0).all() and (weights >= 0).all()


@pytest.mark.parametrize("channels", [3, 1])
def test_batched_resize_equals_antialiased_interpolate_per_sample(channels):
    # shrink by more than 2x, shrink a little, enlarge, and one crop of exactly the output size
    sizes = [(200, 150), (50, 61), (20, 30), (32, 40), (33, 90)]
    canvas, pieces, heights, widths = padded_canvas(sizes, channels)
    got = resize_batch(canvas, heights, widths, (32, 40))
    assert got.shape == (5, 32, 40, channels) and got.dtype == torch.uint8 and got.is_contiguous()
    for k, piece in enumerate(pieces):
        reference = F.interpolate(piece.permute(2, 0, 1)[None].double(), size=(32, 40), mode="bilinear",
                                  antialias=True, align_corners=False)[0].permute(1, 2, 0).round().clamp(0, 255)
        difference = (got[k].double() - reference).abs()
        assert difference.max() <= 1 and difference.mean() <= 0.01, sizes[k]  # only float rounding at .5
    assert torch.equal(got[3], pieces[3])  # the crop of the output size comes through unchanged
    other_padding = resize_batch(padded_canvas(sizes, channels, fill=0)[0], heights, widths, (32, 40))
    assert torch.equal(got, other_padding)  # the padding beyond each crop is never read


def test_batched_resize_is_within_a_level_of_pillow_bilinear():
    sizes = [(120, 90), (45, 70), (16, 16)]
    canvas, pieces, heights, widths = padded_canvas(sizes)
    got = resize_batch(canvas, heights, widths, (24, 30)).numpy().astype(np.int64)
    for k, piece in enumerate(pieces):
        expected = pil_resized_crop(piece.numpy(), (0, 0, *sizes[k]), (24, 30)).astype(np.int64)
        difference = np.abs(got[k] - expected)
        assert difference.max() <= 1 and difference.mean() <= 0.3  # Pillow rounds in fixed point


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_resize_equals_the_cpu_resize():
    sizes = [(300, 220), (64, 90), (17, 23)]
    canvas, _, heights, widths = padded_canvas(sizes)
    on_cpu = resize_batch(canvas, heights, widths, (48, 40))
    on_cuda = resize_batch(canvas.cuda(), heights, widths, (48, 40))
    assert on_cuda.is_cuda
    assert (on_cuda.cpu().to(torch.int64) - on_cpu.to(torch.int64)).abs().max() <= 1  # float sums in another order
