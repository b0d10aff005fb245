"""Resize a whole batch of crops of different sizes to one output size, in one batched operation on the device.

The crops lie in a padded uint8 canvas (B, Hc, Wc, C): crop k fills canvas[k, :heights[k], :widths[k]] and the rest
of its slot is ignored (never read with a nonzero weight, so it need not be cleared). The resize is separable: a
(H, Hc) matrix of row weights and a (W, Wc) matrix of column weights per sample, applied with two batched matrix
products (`torch.bmm`) over the whole batch; no loop over samples.

The weights are Pillow's BILINEAR filter, which is also torch's `F.interpolate(mode="bilinear", antialias=True,
align_corners=False)`: output pixel i samples the crop at centre (i + 0.5) * s (s = crop size / output size) with
a triangle filter of half-width max(s, 1) source pixels, normalised over the taps inside the crop. So it is
antialiased when shrinking (the support widens with s, as on the CPU path in `feed/cpu_resize.py`) and plain bilinear,
edges clamped, when enlarging. It is not the CPU path's uint8 fixed-point kernel: results agree within 1 level.

Cost per batch: 2 * B * H * Hc * Wc * C + 2 * B * W * Wc * H * C multiply-adds in float32, e.g. 130 GFLOP for 256
crops padded to 512x512 at 224x224 (milliseconds on a datacentre GPU). Memory: the canvas as float32 (4 bytes a
padded pixel channel, 805 MB for that batch) plus two smaller intermediates, so the padding to the batch's largest
crop is what costs: pack photos with a bounded side (`gpufeed pack --max-side`). With TF32 matmuls enabled
(`torch.backends.cuda.matmul.allow_tf32`) the weights lose precision (11 significant bits; pixel values are exact):
outputs then move by up to about 0.25 of a level before rounding.
"""

from __future__ import annotations

import torch


def filter_weights(sizes: torch.Tensor, extent: int, out_size: int) -> torch.Tensor:
    """Per-sample resampling weights float32 (B, out_size, extent): row i of sample k weights the source pixels
    0..sizes[k]-1 (zero beyond) for output pixel i; each row sums to 1."""
    sizes = sizes.to(torch.float32).reshape(-1, 1, 1)  # (B, 1, 1)
    device = sizes.device
    scale = sizes / out_size  # source pixels per output pixel
    support = scale.clamp_min(1.0)  # the triangle's half-width, widened when shrinking
    centres = (torch.arange(out_size, dtype=torch.float32, device=device).view(1, -1, 1) + 0.5) * scale  # (B, out, 1)
    taps = torch.arange(extent, dtype=torch.float32, device=device).view(1, 1, -1) + 0.5  # pixel centres (1, 1, extent)
    weights = (1.0 - ((taps - centres) / support).abs()).clamp_min_(0.0)  # (B, out, extent)
    weights.mul_(taps < sizes)  # only the crop's own pixels
    return weights.div_(weights.sum(dim=2, keepdim=True))


def resize_batch(canvas: torch.Tensor, heights: torch.Tensor, widths: torch.Tensor,
                 size: tuple[int, int]) -> torch.Tensor:
    """Crops in uint8 `canvas` (B, Hc, Wc, C) of sizes (heights, widths) (B,) -> uint8 (B, H, W, C) at `size`,
    on the canvas's device."""
    batch, extent_height, extent_width, channels = canvas.shape
    out_height, out_width = size
    rows = filter_weights(heights.to(canvas.device), extent_height, out_height)  # (B, H, Hc)
    columns = filter_weights(widths.to(canvas.device), extent_width, out_width)  # (B, W, Wc)
    pixels = canvas.reshape(batch, extent_height, extent_width * channels).float()  # (B, Hc, Wc * C)
    # down the columns: (B, Wc * C, Hc) @ (B, Hc, H) -> (B, Wc * C, H), which is (B, Wc, C * H) in memory
    tall = torch.bmm(pixels.transpose(1, 2), rows.transpose(1, 2))
    # along the rows: (B, W, Wc) @ (B, Wc, C * H) -> (B, W, C * H)
    resized = torch.bmm(columns, tall.view(batch, extent_width, channels * out_height))
    resized = resized.view(batch, out_width, channels, out_height).permute(0, 3, 1, 2)  # (B, H, W, C)
    out = torch.empty((batch, out_height, out_width, channels), dtype=torch.uint8, device=canvas.device)
    return out.copy_(resized.round_().clamp_(0, 255))
