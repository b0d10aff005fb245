"""plan/memory.py against hand arithmetic: exact bytes of weights, gradients, optimizer state and activations.

The small model throughout is gpufeed's MLP on 3x4x4 samples: flatten (48) -> Linear(48, 16) -> ReLU (in place)
-> Linear(16, 4). Parameters 48*16 + 16 + 16*4 + 4 = 852, so fp32 weights are 3,408 bytes in four tensors:
W1 3,072, b1 64, W2 256, b2 16. The same traces were measured on this CPU with torch.profiler's allocator
events (benchmarks/plan_accuracy.py) and agree to the byte.
"""

from __future__ import annotations

import math
import resource

import pytest
import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.plan.memory import CUDA_BLOCK_BYTES, CUDA_CONTEXT_BYTES, estimate_memory, max_batch_size
from gpufeed.train.models import build_model

SAMPLE = (3, 4, 4)
SMALL_WEIGHT_SIZES = (3072, 64, 256, 16)  # W1, b1, W2, b2 in fp32 bytes


def small_mlp(hidden: tuple[int, ...] = (16,)) -> nn.Module:
    return build_model("mlp", SAMPLE, 4, hidden=hidden)


def test_weights_gradients_and_optimizer_state_of_the_default_mlp():
    mlp = lambda: build_model("mlp", (3, 32, 32), 10)  # noqa: E731
    params = 3072 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert params == 1_707_274
    adamw = estimate_memory(mlp, (3, 32, 32), 8, 10, "adamw", "fp32", "cpu")
    assert (adamw.parameters, adamw.weights_bytes, adamw.gradients_bytes) == (params, 6_829_096, 6_829_096)
    # exp_avg and exp_avg_sq per parameter, and a float32 step count (4 bytes) per parameter tensor (6 of them)
    assert adamw.optimizer_bytes == 2 * 6_829_096 + 6 * 4
    sgd = estimate_memory(mlp, (3, 32, 32), 8, 10, "sgd", "fp32", "cpu")
    assert sgd.optimizer_bytes == 6_829_096  # one momentum buffer per parameter
    fp64 = estimate_memory(mlp, (3, 32, 32), 8, 10, "adam", "fp64", "cpu")
    assert (fp64.weights_bytes, fp64.optimizer_bytes) == (8 * params, 2 * 8 * params + 6 * 4)


def test_buffers_count_as_weights():
    cnn = estimate_memory(lambda: build_model("cnn", (3, 32, 32), 10), (3, 32, 32), 4, 10, "sgd", "fp32", "cpu")
    # 7 BatchNorms (stem 16, blocks 32, 32, 64, 64, 128, 128): running mean and var in fp32, an int64 counter
    buffers = 2 * 4 * (16 + 32 + 32 + 64 + 64 + 128 + 128) + 7 * 8
    assert cnn.parameters == 292_954
    assert (cnn.weights_bytes, cnn.gradients_bytes) == (4 * 292_954 + buffers, 4 * 292_954)


def test_activations_of_a_small_mlp_by_hand():
    """Batch 8, SGD, fp32. The peak is in the backward, when Linear1's weight gradient has just been made: all
    four gradients (3,408) exist, the momentum buffers (3,408) and weights (3,408) too, and besides them:
      input 8x48 fp32          1,536   (the batch, held by the loop)
      labels 8 int64              64
      loss ()                      4
      d loss / d loss ()           4   (autograd's root gradient, held through the backward)
      ReLU's input gradient 8x16 512   (the gradient flowing into Linear1)
    Gone by then: the logits (the step's loss function returned without them), Linear1's output (saved by ReLU and
    Linear2, released as they were passed), log-softmax output, nll's total_weight, the gradient into Linear2 and
    into log-softmax."""
    estimate = estimate_memory(small_mlp, SAMPLE, 8, 4, "sgd", "fp32", "cpu")
    assert estimate.activations_bytes == 1536 + 64 + 4 + 4 + 512 == 2120
    assert estimate.peak_bytes == 3 * 3408 + 2120
    assert estimate.overhead_bytes == 0
    assert estimate.notes[0].startswith("peak in the backward")


def test_accumulating_gradients_holds_them_through_the_forward_and_backward():
    """grad_accumulation 2, SGD, batch 8: the second micro-batch runs with the first one's gradients (3,408) held,
    and each new gradient is made beside them before it is added in. The peak is in the backward, when Linear1's
    new weight and bias gradients exist: input 1,536 + labels 64 + loss 4 + loss / 2 4 + its root
    gradient 4 + ReLU's input gradient 512 + new W1 gradient 3,072 + new b1 gradient 64. The first micro-batch
    is the grads_freed step of test_activations_of_a_small_mlp_by_hand, plus the loss / 2 scalar."""
    estimate = estimate_memory(small_mlp, SAMPLE, 8, 4, "sgd", "fp32", "cpu", grad_accumulation=2)
    assert estimate.activations_bytes == 1536 + 64 + 4 + 4 + 4 + 512 + 3072 + 64 == 5260
    assert estimate.peak_bytes == 3 * 3408 + 5260
    assert estimate.peak_bytes_by_order == {"grads_freed": 3 * 3408 + 2120 + 4, "grads_live": 3 * 3408 + 5260}
    assert estimate.grad_accumulation == 2 and "2 micro-batches" in estimate.step_order
    plain = estimate_memory(small_mlp, SAMPLE, 8, 4, "sgd", "fp32", "cpu")
    assert plain.peak_bytes == plain.peak_bytes_by_order["grads_freed"] == 3 * 3408 + 2120
    assert plain.peak_bytes_by_order["grads_live"] > plain.peak_bytes  # reported, not planned
    assert "zero_grad(set_to_none=True) before each forward" in plain.step_order


def _measured_cpu_peak(factory, batch: int, precision: str, optimizer: str, accumulation: int) -> int:
    """The CPU allocator's live total at its largest in steps 2 and 3 of the real step (plan --check's method)."""
    from torch.profiler import record_function

    from gpufeed.plan.check import profiled_cpu_peak
    from gpufeed.train.step import Precision, TrainStep, make_optimizer, random_batch

    def run() -> None:
        model = factory()
        step = TrainStep(model, make_optimizer(optimizer, model.parameters()), Precision(precision, ""), "cpu")
        inputs, labels = random_batch(batch, SAMPLE, 4, "cpu", torch.float32, channels_last=False)
        for index in range(3):
            with record_function(f"step {index}"):
                step.accumulate([(inputs, labels)] * accumulation, accumulation)

    return profiled_cpu_peak(run, {"step 1", "step 2"})


@pytest.mark.parametrize("hidden, batch, precision, optimizer, accumulation", [
    ((16,), 8, "fp32", "sgd", 1), ((16,), 8, "fp32", "sgd", 2),
    pytest.param((256,), 1, "bf16", "adamw", 2, marks=pytest.mark.isa),
    pytest.param((256,), 1, "bf16", "sgd", 1, marks=pytest.mark.isa), ((64, 32), 16, "fp32", "adamw", 3)])
def test_traced_peak_matches_the_allocator_on_a_real_step(hidden, batch, precision, optimizer, accumulation):
    """The trace against an independent measurement: the CPU allocator's own events for the same loop run for
    real. From 64 bytes under (the optimizer's scalar tensors, e.g. lr and step counts, are made outside the
    trace) to 64 bytes over the plan's stated bound on the untraced scratch of bf16 matrix-product kernels,
    which differs by instruction set (0 for fp32; .ci/run repeats the bf16 cases, marked isa, under
    ONEDNN_MAX_CPU_ISA=AVX2)."""
    factory = lambda: small_mlp(hidden)  # noqa: E731
    estimate = estimate_memory(factory, SAMPLE, batch, 4, optimizer, precision, "cpu",
                               grad_accumulation=accumulation)
    measured = _measured_cpu_peak(factory, batch, precision, optimizer, accumulation)
    assert (estimate.kernel_scratch_bound_bytes == 0) == (precision == "fp32")
    assert -64 <= measured - estimate.peak_bytes <= estimate.kernel_scratch_bound_bytes + 64, \
        (estimate.peak_bytes, measured, estimate.kernel_scratch_bound_bytes)


def test_bf16_counts_autocast_copies_of_the_weights():
    """MLP 48 -> 256 -> 4, batch 1, bf16 autocast: autocast's cache holds a bf16 copy of every weight (13,572
    parameters x 2 bytes) through the forward; the master weights stay fp32."""
    params = 48 * 256 + 256 + 256 * 4 + 4
    estimate = estimate_memory(lambda: small_mlp((256,)), SAMPLE, 1, 4, "sgd", "bf16", "cpu")
    copies = 2 * params  # W1 24,576 + b1 512 + W2 2,048 + b2 8
    assert estimate.weights_bytes == 4 * params  # the fp32 master weights
    assert f"bf16 copies of the weights: {copies:,} bytes" in " ".join(estimate.notes)
    fp32 = estimate_memory(lambda: small_mlp((256,)), SAMPLE, 1, 4, "sgd", "fp32", "cpu")
    assert "copies of the weights" not in " ".join(fp32.notes)


def test_cuda_target_adds_context_and_rounds_blocks_to_512_bytes():
    """The same small-MLP peak as on the CPU, each storage rounded up to 512 bytes, plus the CUDA context."""
    # weights, input, labels, momentum, loss, root gradient, W2 and b2 gradients, ReLU's input gradient, W1 and b1
    # gradients: the storages of test_activations_of_a_small_mlp_by_hand
    live_at_peak = (*SMALL_WEIGHT_SIZES, 1536, 64, *SMALL_WEIGHT_SIZES, 4, 4, 256, 16, 512, 3072, 64)
    assert sum(live_at_peak) == 3 * 3408 + 2120  # weights, gradients, momentum, activations
    rounded = sum(math.ceil(size / CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES for size in live_at_peak)
    estimate = estimate_memory(small_mlp, SAMPLE, 8, 4, "sgd", "fp32", "cuda")
    assert estimate.peak_bytes == CUDA_CONTEXT_BYTES + rounded
    assert estimate.overhead_bytes == CUDA_CONTEXT_BYTES + rounded - sum(live_at_peak)


def test_a_module_and_its_factory_give_the_same_estimate_and_the_module_is_untouched():
    module = small_mlp()
    before = {name: tensor.clone() for name, tensor in module.state_dict().items()}
    assert estimate_memory(module, SAMPLE, 8, 4, "adamw", "fp32", "cpu") == \
        estimate_memory(small_mlp, SAMPLE, 8, 4, "adamw", "fp32", "cpu")
    assert all(torch.equal(before[name], tensor) for name, tensor in module.state_dict().items())
    assert all(p.grad is None and p.device.type == "cpu" for p in module.parameters())


def test_a_10_gb_model_is_estimated_without_allocating_it():
    peak_rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    factory = lambda: nn.Sequential(nn.Flatten(), nn.Linear(50_000, 50_000), nn.Linear(50_000, 10))  # noqa: E731
    estimate = estimate_memory(factory, (50_000,), 4, 10, "adamw", "fp32", "cpu")
    peak_rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_rss_before
    params = 50_000 * 50_000 + 50_000 + 50_000 * 10 + 10
    assert estimate.weights_bytes == 4 * params > 10 * 10**9
    assert estimate.peak_bytes > 4 * estimate.weights_bytes  # weights, gradients, Adam's two moments
    assert peak_rss_growth < 200 * 2**20  # the most this process ever held grew by less than 200 MiB


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_max_batch_size_matches_a_brute_force_search(device_type):
    peaks = [estimate_memory(lambda: small_mlp((64,)), SAMPLE, batch, 4, "adamw", "fp32", device_type).peak_bytes
             for batch in range(1, 41)]  # peaks[b - 1] is the peak of batch b
    for capacity in (peaks[0] - 1, peaks[0], (peaks[24] + peaks[25]) // 2, peaks[35]):
        brute_force = sum(1 for peak in peaks if peak <= capacity)  # the peak grows with the batch
        found = max_batch_size(lambda: small_mlp((64,)), SAMPLE, 4, capacity, "adamw", "fp32", device_type)
        assert found == brute_force
    assert peaks == sorted(peaks) and brute_force >= 36  # (on CUDA, 37 may round to the same bytes as 36)


def test_max_batch_size_remembers_traces_per_factory_and_answers_as_a_fresh_search():
    factory, capacities = (lambda: small_mlp((64,))), (10**6, 100_000, 2 * 10**6, 100_000, 150_000)
    remembered = [max_batch_size(factory, SAMPLE, 4, capacity, "adamw", "fp32", "cpu") for capacity in capacities]
    fresh = [max_batch_size(lambda: small_mlp((64,)), SAMPLE, 4, capacity, "adamw", "fp32", "cpu")
             for capacity in capacities]
    assert remembered == fresh and remembered[1] == remembered[3]
    assert remembered[2] > remembered[0] > remembered[4] > remembered[1] > 1


def test_max_batch_size_of_a_convnet_is_the_largest_that_fits():
    factory, capacity = (lambda: build_model("cnn", (3, 32, 32), 10)), 2**30
    found = max_batch_size(factory, (3, 32, 32), 10, capacity, "adamw", "bf16", "cuda")

    def peak(batch: int) -> int:
        return estimate_memory(factory, (3, 32, 32), batch, 10, "adamw", "bf16", "cuda").peak_bytes

    assert found > 1 and peak(found) <= capacity < peak(found + 1)


def test_a_factory_that_raises_is_a_config_error_with_its_message_on_one_line():
    def broken() -> nn.Module:
        raise ValueError("no such layer: 'conv9'\nsee the model list")

    with pytest.raises(ConfigError) as raised:
        estimate_memory(broken, SAMPLE, 8, 4)
    message = str(raised.value)
    assert "ValueError: no such layer: 'conv9' see the model list" in message and "\n" not in message


@pytest.mark.parametrize("batch", [0, -3, True, 2.0])
def test_a_batch_that_is_not_a_positive_int_is_a_config_error(batch):
    with pytest.raises(ConfigError, match="batch size"):
        estimate_memory(small_mlp, SAMPLE, batch, 4)


@pytest.mark.parametrize("arguments, match", [
    (dict(optimizer="lamb"), "unknown optimizer 'lamb'"),
    (dict(precision="fp8"), "unknown precision 'fp8'"),
    (dict(device_type="tpu"), "unknown device type 'tpu'"),
    (dict(input_shape=(3, 0, 4)), "input shape"),
    (dict(num_classes=5), r"returns \(8, 4\) for a batch of 8, not \(8, 5\)"),
    (dict(input_shape=(3, 5, 5)), "could not trace a training step on a batch of shape \\(8, 3, 5, 5\\): Runtime"),
])
def test_bad_arguments_are_config_errors(arguments, match):
    call = dict(model=small_mlp, input_shape=SAMPLE, batch_size=8, num_classes=4) | arguments
    with pytest.raises(ConfigError, match=match):
        estimate_memory(**call)
    with pytest.raises(ConfigError, match="capacity"):
        max_batch_size(small_mlp, SAMPLE, 4, 0)
