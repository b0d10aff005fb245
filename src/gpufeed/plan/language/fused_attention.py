"""The memory of `F.scaled_dot_product_attention` as CUDA runs it, for a trace that runs on the CPU's kernels.

On CUDA, sdpa dispatches to a fused kernel, flash attention or memory-efficient attention (torch's
`_fused_sdp_choice`), with or without dropout and with a mask (memory-efficient): neither holds the (B, heads, N,
N) scores. Each saves for the backward its inputs, its output and the log-sum-exp of each query row, float32
(B, heads, N), plus the dropout generator's seed and offset (two scalars); its backward makes the three input
gradients and, as workspace, the row sums of dO * O, float32 (B, heads, N), and flash's float32 accumulator of dQ
(torch/csrc and aten/src/ATen/native/transformers/cuda/flash_attn: `dq_accum`). On the CPU, torch's flash kernel
saves the same, but only without dropout: with dropout (GPT-2's attention, 0.1) it falls back to the math path,
which holds the scores, their softmax and the dropout mask, about three (B, heads, N, N) tensors a layer. A trace
on fake CPU tensors of a CUDA plan would therefore book memory the GPU never holds: within `fused_attention()`
sdpa is this module's stand-in, which allocates what the fused kernels allocate and computes nothing.
"""

from __future__ import annotations

import contextlib

import torch


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, shape):
        output = torch.empty(shape, dtype=query.dtype, device=query.device)
        row_log_sum_exp = torch.empty(shape[:-1], dtype=torch.float32, device=query.device)
        seed_and_offset = torch.empty(2, dtype=torch.int64, device=query.device)
        saved = (query, key, value, output, row_log_sum_exp, seed_and_offset)
        ctx.save_for_backward(*saved, *(() if mask is None else (mask,)))
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, _, row_log_sum_exp = ctx.saved_tensors[:5]
        row_sums = torch.empty_like(row_log_sum_exp)  # rowsum(dO * O)
        accumulator = torch.empty(query.shape, dtype=torch.float32, device=query.device)  # flash's dq_accum
        grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value))
        del row_sums, accumulator
        return (*grads, None, None)


def _output_shape(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[int, ...]:
    """sdpa's output: (batch..., heads, N, value size), the batch dimensions broadcast (keys and values may have
    fewer heads than queries: grouped-query attention)."""
    if query.dim() >= 4:
        return (*torch.broadcast_shapes(query.shape[:-3], key.shape[:-3]), *query.shape[-3:-1], value.shape[-1])
    return (*torch.broadcast_shapes(query.shape[:-2], key.shape[:-2]), query.shape[-2], value.shape[-1])


def _stand_in(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _FusedAttention.apply(query, key, value, attn_mask, _output_shape(query, key, value))


@contextlib.contextmanager
def fused_attention():
    """Within it, `torch.nn.functional.scaled_dot_product_attention` books the memory of CUDA's fused kernels (the
    module's docstring); restored on leaving."""
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _stand_in
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
