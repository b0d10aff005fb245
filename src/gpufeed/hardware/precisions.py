"""The precisions gpufeed computes in, and how each runs: the table the peaks, bench's kernels and the training
step (train/step.py) all read, so that a precision means the same thing to each.

`PRECISIONS` is the names a benchmark or a peak takes, in the order they are shown (fp64, fp32, tf32, bf16, fp16);
`PRECISION_SPECS` maps each to its `PrecisionSpec`, and also holds bf16-true, a precision only the planner takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PrecisionSpec:
    """How a precision trains: the parameters' dtype, autocast's dtype (None: no autocast), the batch's dtype
    as gpufeed's feed delivers it, whether TF32 tensor cores are on (the caller switches them:
    `hardware.tf32.tf32_flags`), and whether a gradient scaler is needed."""

    parameter_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    input_dtype: torch.dtype
    tensor_float32: bool = False
    scaled: bool = False

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the matrix products run in."""
        return self.autocast_dtype or self.parameter_dtype


# bf16 batches under bf16 autocast halve the bytes the feed moves; fp16 keeps fp32 inputs (autocast casts them).
PRECISION_SPECS: dict[str, PrecisionSpec] = {
    "fp64": PrecisionSpec(torch.float64, None, torch.float64),
    "fp32": PrecisionSpec(torch.float32, None, torch.float32),
    "tf32": PrecisionSpec(torch.float32, None, torch.float32, tensor_float32=True),
    "bf16": PrecisionSpec(torch.float32, torch.bfloat16, torch.bfloat16),
    "fp16": PrecisionSpec(torch.float32, torch.float16, torch.float32, scaled=True),
    # weights, gradients and optimizer state in bf16, no autocast (torchtune's training; Lightning's name): planned
    # only, never benchmarked (its matrix products are bf16's)
    "bf16-true": PrecisionSpec(torch.bfloat16, None, torch.bfloat16),
}
# Precisions a benchmark or a peak may be asked for, in the order they are shown.
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16")
