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
sdpa is this module's stand-in, which allocates what the fused kernels allocate and computes nothing. It counts the
FLOPs the fused kernels do by torch's own formulas (torch.utils.flop_counter's sdpa_flop_count for the forward,
sdpa_backward_flop_count for the backward: all scores computed, a causal mask not subtracted, as FlopCounterMode
counts a real sdpa), each call anew, so a forward recomputed under checkpointing counts twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count


@dataclass
class AttentionFlops:
    """FLOPs of the stand-in's calls within one `fused_attention()`: forward and backward."""

    forward: int = 0
    backward: int = 0

    @property
    def total(self) -> int:
        return self.forward + self.backward


_COUNTS: list[AttentionFlops] = []  # the innermost fused_attention()'s count last


def _shapes(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> tuple[tuple[int, ...], ...]:
    """(batch, heads, N, size) of each, keys and values at the queries' heads (grouped-query attention computes
    every query head against its shared key head) for torch's formulas."""
    def four(tensor: torch.Tensor) -> tuple[int, ...]:
        shape = tuple(tensor.shape)
        return (1,) * (4 - len(shape)) + shape if len(shape) < 4 else (int(torch.Size(shape[:-3]).numel()),
                                                                        *shape[-3:])
    q, k, v = four(query), four(key), four(value)
    return q, (*q[:2], *k[2:]), (*q[:2], *v[2:])


class _FusedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, mask, shape):
        output = torch.empty(shape, dtype=query.dtype, device=query.device)
        row_log_sum_exp = torch.empty(shape[:-1], dtype=torch.float32, device=query.device)
        seed_and_offset = torch.empty(2, dtype=torch.int64, device=query.device)
        saved = (query, key, value, output, row_log_sum_exp, seed_and_offset)
        ctx.save_for_backward(*saved, *(() if mask is None else (mask,)))
        if _COUNTS:
            _COUNTS[-1].forward += sdpa_flop_count(*_shapes(query, key, value))
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, _, row_log_sum_exp = ctx.saved_tensors[:5]
        row_sums = torch.empty_like(row_log_sum_exp)  # rowsum(dO * O)
        accumulator = torch.empty(query.shape, dtype=torch.float32, device=query.device)  # flash's dq_accum
        grads = (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value))
        if _COUNTS:
            q, k, v = _shapes(query, key, value)
            _COUNTS[-1].backward += sdpa_backward_flop_count((*q[:3], v[3]), q, k, v)
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
    module's docstring) and counts their FLOPs in the `AttentionFlops` it yields; restored on leaving."""
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _stand_in
    _COUNTS.append(AttentionFlops())
    try:
        yield _COUNTS[-1]
    finally:
        _COUNTS.pop()
        torch.nn.functional.scaled_dot_product_attention = original
