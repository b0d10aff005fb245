"""A one-GPU estimate made by hand, and model units, for the sharding and throughput tests."""

from gpufeed.plan.language.sharding import ShardUnits
from gpufeed.plan.memory import MemoryEstimate

T = 1_000_000  # trained parameters of the hand-made estimate
UNITS = ShardUnits(("Block",), count=4, largest_trained=200_000, largest_frozen=0, root_trained=200_000,
                   root_frozen=0)


def estimate(precision="fp32", activations=3_000_000, copies=0, frozen=0, optimizer_step=0, accumulation=1,
             peak_gradients=0):
    """A one-GPU estimate by hand: AdamW on T trained parameters in the precision's layout (fp32 and bf16 under
    autocast: 4 + 4 + 8 bytes; bf16-true 2 + 2 + 4), its peak at the backward's start."""
    weight = 2 if precision == "bf16-true" else 4
    parts = {"weights": T * weight + frozen, "gradients": peak_gradients, "optimizer": 2 * T * weight,
             "activations": activations, "overhead": 0}
    return MemoryEstimate(parameters=T, weights_bytes=T * weight + frozen, gradients_bytes=T * weight,
                          optimizer_bytes=2 * T * weight, activations_bytes=activations, overhead_bytes=0,
                          peak_bytes=sum(parts.values()), batch_size=1, precision=precision, optimizer="adamw",
                          method="by hand", notes=(), grad_accumulation=accumulation, trainable_parameters=T,
                          trainable_weights_bytes=T * weight, frozen_weights_bytes=frozen,
                          optimizer_step_bytes=optimizer_step, peak_phase="backward", peak_parts=parts,
                          weight_copies_bytes=copies, computing_gradients_bytes=peak_gradients)
