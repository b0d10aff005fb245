"""A stated upper bound on the scratch a CPU matrix-product kernel allocates and frees inside itself.

A fake-tensor trace sees the tensors an operator returns, not the buffers its kernel allocates and frees before
returning. On the CPU, torch runs bf16 and fp16 matrix products through oneDNN, whose scratchpad comes from
torch's own allocator, so it shows in the allocator's peak (`plan --check`) but in no trace. Its size depends
on the instruction set oneDNN picks (AVX-512, AVX-512 with bf16, AMX: the same step measured 0, 1,152, 18,560 and
75,520 bytes of scratch in one kernel on one machine under `ONEDNN_MAX_CPU_ISA`), on the cache sizes that set
its blocking, and on the threads. It cannot be traced, so the planner bounds it:

    scratch <= 4 * (threads * (M' K' + K' N') + M' N') bytes, per matrix of a batched product,

where M x K times K x N is the product and M', K', N' are each rounded up to a multiple of 64. Why this holds:
oneDNN's brgemm and gemm kernels keep (a) copies of blocks of the operands reordered into their register
layout (VNNI pairs for AVX-512 bf16, 32-deep tiles for AMX), at most the whole operand padded to its blocks
(blocks of at most 64 rows or columns), in at most 4 bytes an element, one copy per thread at most (threads
that split the rows each pack their own panel of the other operand); and (b) an fp32 accumulator for an
output that is not fp32, at most M' x N' elements. Measured against the bound on this project's machines
(tests/plan/test_kernel_scratch.py sweeps shapes under every ISA the CPU allows): at most about half of it.
fp32 and fp64 products go to MKL, whose buffers are not torch's (neither trace nor allocator sees them): 0.
"""

from __future__ import annotations

import math

import torch

BLOCK = 64  # the largest register block of oneDNN's bf16 brgemm / AMX kernels, in rows, columns and depth
REDUCED = (torch.bfloat16, torch.float16)
_MATMULS = {
    torch.ops.aten.mm.default: (0, 1),
    torch.ops.aten.addmm.default: (1, 2),
    torch.ops.aten.bmm.default: (0, 1),
    torch.ops.aten.baddbmm.default: (1, 2),
}


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def product_scratch_bound(m: int, k: int, n: int, threads: int, batch: int = 1) -> int:
    """Bytes: the bound above for `batch` products of (m x k) by (k x n) on `threads` threads."""
    m, k, n = _padded(m), _padded(k), _padded(n)
    return batch * 4 * (threads * (m * k + k * n) + m * n)


def scratch_bound(func, args: tuple, threads: int) -> int:
    """The bound for one dispatched operator: a matrix product in bf16 or fp16 on the CPU, else 0."""
    places = _MATMULS.get(func)
    if places is None or len(args) <= max(places):
        return 0
    left, right = args[places[0]], args[places[1]]
    if not (isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor)) or left.device.type != "cpu" \
            or left.dtype not in REDUCED or left.dim() != right.dim() or left.dim() not in (2, 3):
        return 0
    batch = math.prod(left.shape[:-2])
    return product_scratch_bound(left.shape[-2], left.shape[-1], right.shape[-1], threads, batch)
