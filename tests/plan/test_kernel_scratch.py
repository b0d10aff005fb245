"""plan/kernel_scratch.py: the stated bound on a CPU matrix product's untraced scratch, against the allocator.

Measured: the CPU allocator's largest live total while one product runs (torch.profiler's memory events), less
its two operands and its output, which are allocated before and kept after. The instruction set oneDNN uses
changes the scratch (none under AVX2, up to tens of kB for these shapes under AVX-512 bf16 or AMX); .ci/run
repeats the measured products (marked isa) under ONEDNN_MAX_CPU_ISA=AVX2, and it was run here under
AVX512_CORE, AVX512_CORE_BF16 and AVX512_CORE_AMX too.
"""

from __future__ import annotations

import pytest
import torch

from gpufeed.plan.check import profiled_cpu_peak
from gpufeed.plan.kernel_scratch import product_scratch_bound, scratch_bound

SHAPES = [(1, 48, 256), (256, 1, 48), (16, 256, 10), (33, 48, 48), (256, 3, 1000), (512, 512, 512)]


def test_the_bound_by_hand():
    # 1 x 48 by 48 x 256 on 2 threads: M', K', N' = 64, 64, 256; 4 * (2 * (64*64 + 64*256) + 64*256)
    assert product_scratch_bound(1, 48, 256, threads=2) == 4 * (2 * (4096 + 16384) + 16384) == 229376
    assert product_scratch_bound(1, 48, 256, threads=2, batch=3) == 3 * 229376
    assert product_scratch_bound(64, 64, 64, threads=1) == 4 * (2 * 4096 + 4096)


def test_only_reduced_precision_products_on_the_cpu_are_bounded():
    left, right = torch.empty(2, 3, dtype=torch.bfloat16), torch.empty(3, 5, dtype=torch.bfloat16)
    assert scratch_bound(torch.ops.aten.mm.default, (left, right), 1) == product_scratch_bound(2, 3, 5, 1)
    bias = torch.empty(5, dtype=torch.bfloat16)
    assert scratch_bound(torch.ops.aten.addmm.default, (bias, left, right), 1) == product_scratch_bound(2, 3, 5, 1)
    batched = (torch.empty(4, 2, 3, dtype=torch.float16), torch.empty(4, 3, 5, dtype=torch.float16))
    assert scratch_bound(torch.ops.aten.bmm.default, batched, 2) == product_scratch_bound(2, 3, 5, 2, batch=4)
    assert scratch_bound(torch.ops.aten.mm.default, (left.float(), right.float()), 1) == 0  # MKL, not torch's
    assert scratch_bound(torch.ops.aten.relu.default, (left,), 1) == 0


@pytest.mark.isa
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_a_products_scratch_stays_within_the_bound(m, k, n, dtype):
    sizes = {}

    def run() -> None:
        from torch.profiler import record_function

        left, right = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
        with record_function("product"):
            out = torch.mm(left, right)
        sizes["kept"] = sum(t.untyped_storage().nbytes() for t in (left, right, out))

    peak = profiled_cpu_peak(run, {"product"})
    scratch = peak - sizes["kept"]
    assert 0 <= scratch <= product_scratch_bound(m, k, n, torch.get_num_threads()), (scratch, m, k, n)
