"""Planner accuracy: the peak memory of a training step predicted by `gpufeed.plan.memory` against the measured one.

    python benchmarks/plan_accuracy.py [--device cpu|cuda]

For each case (MLPs of several depths, the project's CNN and ResNet-18, a small transformer encoder on token
embeddings and one on token ids; Adam(W) and SGD with momentum; several batch sizes; fp32 and bf16 autocast):
- predicted: `estimate_memory(...).peak_bytes`, a fake-tensor trace (nothing allocated) of train/step.py's step
  (for the loop that zeroes gradients after the forward, `peak_bytes_by_order["grads_live"]`);
- measured, by a path that shares nothing with the planner's (no dispatch mode, no fake tensors, no weak
  references): the real step, the same loop (zero_grad -> forward -> cross-entropy -> backward -> step, twice;
  logits and loss held until the step ends), torch's default optimizer settings for the device.
  CPU: run under `torch.profiler.profile(profile_memory=True)`; the CPU allocator reports every allocation and
  free; model, optimizer and batch are all allocated inside the profile, so the running sum of those events is
  the live total, and the measured peak is its maximum inside the second step.
  CUDA: `torch.cuda.max_memory_allocated()` over the second step, against the prediction less
  CUDA_CONTEXT_BYTES (the allocator does not count the context).
- baseline: accelerate's `estimate-memory` figure ("Training using Adam", batch-independent: the largest of its
  per-item sizes) from accelerate's own functions, when accelerate is importable.
Target: |error| <= 10% on every case.

Then language models (`--language`, or both by default): small Llama, GPT-2 and T5 configurations built as
`gpufeed plan` builds them (transformers' code on the meta device, peft's LoRA), each full, LoRA (bf16 base),
activation-checkpointed and bf16-true, AdamW, the model's own loss. Predicted: `estimate_language_memory` on fake
tensors for the device; measured: `plan --check`'s path (plan/language/check.py: the same model given real
weights in the plan's dtypes, trained three steps), the CPU allocator's events or `max_memory_allocated` as above.
Target for these: |error| <= 5% (the issue's).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import record_function

from gpufeed.hardware.na import is_na
from gpufeed.plan.check import profiled_cpu_peak
from gpufeed.plan.memory import CUDA_CONTEXT_BYTES, estimate_memory
from gpufeed.train.models import build_model

VOCABULARY = 1000


class TransformerClassifier(nn.Module):
    """nn.TransformerEncoder (post-norm, ReLU, dropout 0.1) on (B, T, d) embeddings, or on (B, T) token ids
    through an nn.Embedding; mean over tokens -> Linear head."""

    def __init__(self, d: int = 128, heads: int = 4, layers: int = 2, classes: int = 10, tokens: bool = False):
        super().__init__()
        self.embedding = nn.Embedding(VOCABULARY, d) if tokens else None
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embedding is not None:
            x = self.embedding(x)  # (B, T) -> (B, T, d)
        return self.head(self.encoder(x).mean(1))  # (B, T, d) -> (B, d) -> (B, classes)


@dataclass(frozen=True)
class Case:
    name: str
    factory: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    optimizer: str
    batch_size: int
    precision: str = "fp32"
    input_dtype: torch.dtype = torch.float32
    options: dict = field(default_factory=dict)  # channels_last, zero_grad_after_forward (of the measured loop)
    accumulation: int = 1  # micro-batches per optimizer step, gradients summed


def image_model(name: str, **arguments) -> Callable[[], nn.Module]:
    return lambda: build_model(name, (3, 32, 32), 10, **arguments)


CASES = (
    Case("mlp 3072-512-256-10", image_model("mlp"), (3, 32, 32), "adamw", 32),
    Case("mlp 3072-512-256-10", image_model("mlp"), (3, 32, 32), "sgd", 512),
    Case("mlp 4 x 1024 hidden", image_model("mlp", hidden=(1024,) * 4), (3, 32, 32), "adam", 64),
    Case("linear 3072-10", image_model("mlp", hidden=()), (3, 32, 32), "sgd", 256),
    Case("cnn (width 32)", image_model("cnn"), (3, 32, 32), "adamw", 32),
    Case("cnn (width 32)", image_model("cnn"), (3, 32, 32), "sgd", 256),
    Case("cnn (width 32)", image_model("cnn"), (3, 32, 32), "adamw", 128, "bf16"),
    Case("cnn, zero_grad after the forward", image_model("cnn"), (3, 32, 32), "adamw", 128,
         options=dict(channels_last=True, zero_grad_after_forward=True)),
    Case("mlp 4 x 1024 hidden, 2 micro-batches", image_model("mlp", hidden=(1024,) * 4), (3, 32, 32), "adam", 4096,
         accumulation=2),
    Case("resnet18", image_model("resnet18"), (3, 32, 32), "adamw", 8),
    Case("resnet18", image_model("resnet18"), (3, 32, 32), "sgd", 32),
    Case("resnet18", image_model("resnet18"), (3, 32, 32), "sgd", 32, "bf16"),
    Case("transformer d128 x2, T=64", TransformerClassifier, (64, 128), "adamw", 16),
    Case("transformer d128 x2, T=64", TransformerClassifier, (64, 128), "sgd", 64),
    Case("transformer + embedding", lambda: TransformerClassifier(tokens=True), (128,), "adamw", 32,
         input_dtype=torch.long),
)


def make_optimizer(name: str, parameters) -> torch.optim.Optimizer:
    """Torch's defaults (foreach chosen by torch for the device); SGD with momentum 0.9."""
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=0.01, momentum=0.9)
    return (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(parameters, lr=1e-3)


def make_batch(case: Case, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    shape = (case.batch_size, *case.input_shape)
    if case.input_dtype == torch.long:
        inputs = torch.randint(0, VOCABULARY, shape, device=device)
    else:
        inputs = torch.randn(shape, device=device, dtype=case.input_dtype)
    if case.options.get("channels_last"):
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, torch.randint(0, 10, (case.batch_size,), device=device)


def build(case: Case, device: torch.device):
    model = case.factory().to(device)
    if case.options.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    return model, make_optimizer(case.optimizer, model.parameters()), *make_batch(case, device)


def train_step(model, optimizer, inputs, labels, case: Case) -> None:
    if case.accumulation > 1:
        accumulating_step(model, optimizer, inputs, labels, case)
        return
    after = case.options.get("zero_grad_after_forward", False)
    autocast = (torch.autocast(inputs.device.type, dtype=torch.bfloat16) if case.precision == "bf16"
                else contextlib.nullcontext())
    if not after:
        optimizer.zero_grad(set_to_none=True)
    with autocast:
        logits = model(inputs)
        loss = F.cross_entropy(logits, labels)
    if after:
        optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def accumulating_step(model, optimizer, inputs, labels, case: Case) -> None:
    """The usual accumulation loop: zero once, forward and backward of each micro-batch (the same batch
    again here), then one step."""
    optimizer.zero_grad(set_to_none=True)
    for _ in range(case.accumulation):
        loss = F.cross_entropy(model(inputs), labels) / case.accumulation
        loss.backward()
    optimizer.step()


def measured_peak_cpu(case: Case) -> int:
    """The largest running sum of the CPU allocator's events within the second step (plan/check.py's method)."""
    torch.manual_seed(0)

    def run() -> None:
        model, optimizer, inputs, labels = build(case, torch.device("cpu"))
        for step in range(2):
            with record_function(f"step {step}"):
                train_step(model, optimizer, inputs, labels, case)
        del model, optimizer, inputs, labels

    peak = profiled_cpu_peak(run, {"step 1"})
    if is_na(peak):
        raise SystemExit(f"plan_accuracy: cannot measure the CPU peak: {peak.reason}")
    return peak


def measured_peak_cuda(case: Case) -> int:
    torch.manual_seed(0)
    model, optimizer, inputs, labels = build(case, torch.device("cuda"))
    train_step(model, optimizer, inputs, labels, case)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    train_step(model, optimizer, inputs, labels, case)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def accelerate_estimate(case: Case) -> int | None:
    """accelerate's `estimate-memory` "Training using Adam" figure for this model, or None without accelerate."""
    try:
        from accelerate import init_empty_weights
        from accelerate.commands.estimate import estimate_training_usage
        from accelerate.utils import calculate_maximum_sizes
    except ImportError:
        return None
    with init_empty_weights():
        model = case.factory()
    total_size, _largest_layer = calculate_maximum_sizes(model)
    return max(estimate_training_usage(total_size, "bfloat16" if case.precision == "bf16" else "float32").values())


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "CPU")
    return platform.processor() or "CPU"


def megabytes(nbytes: int | None) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 1e6:,.2f}"


LANGUAGE_CONFIGS = {  # (model_type, fields): hidden 256, 4 layers, vocabulary 8,000, 512 positions
    "llama": dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, vocab_size=8000, max_position_embeddings=512),
    "gpt2": dict(model_type="gpt2", n_embd=256, n_layer=4, n_head=8, n_positions=512, vocab_size=8000),
    "t5": dict(model_type="t5", d_model=256, d_ff=688, d_kv=32, num_layers=4, num_heads=8, vocab_size=8000,
               decoder_start_token_id=0, pad_token_id=0),
}
LANGUAGE_METHODS = (("full", "fp32"), ("lora", "bf16"), ("checkpointing", "fp32"), ("full", "bf16-true"))
LANGUAGE_BATCH, LANGUAGE_TOKENS = 4, 256


def language_case(model, tune, precision: str, device: torch.device) -> tuple[int, int, str]:
    """Predicted and measured peak bytes of one language-model case, and the phase the prediction peaks in."""
    from gpufeed.plan.check import STEP_MARK
    from gpufeed.plan.language.check import real_language_model, run_language_steps
    from gpufeed.plan.language.model import build_language_model
    from gpufeed.plan.memory import estimate_language_memory

    frozen = torch.bfloat16 if tune.method == "lora" else None
    estimate = estimate_language_memory(lambda: build_language_model(model, tune)[0], LANGUAGE_TOKENS,
                                        LANGUAGE_BATCH, "adamw", precision, device.type, frozen_dtype=frozen)

    def run() -> None:
        built = real_language_model(model, tune, precision, frozen, device)
        run_language_steps(built, "adamw", precision, device, LANGUAGE_BATCH, LANGUAGE_TOKENS, 1, 3)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        run()
        return estimate.peak_bytes - CUDA_CONTEXT_BYTES, torch.cuda.max_memory_allocated(device), estimate.peak_phase
    measured = profiled_cpu_peak(run, {STEP_MARK.format(1), STEP_MARK.format(2)})
    if is_na(measured):
        raise SystemExit(f"plan_accuracy: cannot measure the CPU peak: {measured.reason}")
    return estimate.peak_bytes, measured, estimate.peak_phase


def language_rows(device: torch.device) -> list[float]:
    """The language-model table (the module's docstring); the |error| of each row."""
    from transformers import AutoConfig

    from gpufeed.plan.language.model import FineTune, LanguageModel

    print(f"language models: AdamW, batch {LANGUAGE_BATCH} x {LANGUAGE_TOKENS} tokens, the model's own loss, "
          f"sdpa attention")
    print("| model | method | precision | predicted MB | measured MB | predicted - measured, bytes | error | peak in |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    errors = []
    for architecture, fields in LANGUAGE_CONFIGS.items():
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        model = LanguageModel(architecture, "plan_accuracy.py", config, max_positions=512)
        for method, precision in LANGUAGE_METHODS:
            tune = FineTune("lora" if method == "lora" else "full", checkpointing=method == "checkpointing")
            predicted, measured, phase = language_case(model, tune, precision, device)
            error = (predicted - measured) / measured
            errors.append(abs(error))
            print(f"| {architecture} | {method} | {precision} | {megabytes(predicted)} | {megabytes(measured)} | "
                  f"{predicted - measured:+,} | {error:+.2%} | {phase} |")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=("images", "language"), help="one of the two tables (default: both)")
    args = parser.parse_args()
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    try:
        import accelerate
        baseline = f"accelerate {accelerate.__version__}"
    except ImportError:
        baseline = "accelerate is not importable here: its column is n/a"
    print(f"conditions: {time.strftime('%Y-%m-%d')}, device {args.device} ({device_name}), torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} cores, python "
          f"{platform.python_version()}; {baseline}")
    if args.only != "language":
        image_rows(args)
    if args.only != "images":
        errors = language_rows(torch.device(args.device))
        verdict = "met" if max(errors) <= 0.05 else "NOT met"
        print(f"language models: largest |error| {max(errors):.2%}, median {sorted(errors)[len(errors) // 2]:.2%}: "
              f"target ±5% on every case {verdict}")


def image_rows(args) -> None:
    print("| model | optimizer | precision | batch | predicted MB | measured MB | predicted - measured, bytes | error "
          "| accelerate MB | its error |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    errors = []
    for case in CASES:
        options = {key: value for key, value in case.options.items() if key != "zero_grad_after_forward"}
        estimate = estimate_memory(case.factory, case.input_shape, case.batch_size, 10, case.optimizer,
                                   case.precision, args.device, input_dtype=case.input_dtype,
                                   grad_accumulation=case.accumulation, **options)
        # a loop that zeroes after the forward holds last step's gradients through it: the grads_live order
        # (an upper bound on it, equal when the peak is in the forward)
        order = "grads_live" if case.options.get("zero_grad_after_forward") else None
        planned = estimate.peak_bytes_by_order[order] if order else estimate.peak_bytes
        if args.device == "cuda":
            predicted, measured = planned - CUDA_CONTEXT_BYTES, measured_peak_cuda(case)
        else:
            predicted, measured = planned, measured_peak_cpu(case)
        error = (predicted - measured) / measured
        errors.append(abs(error))
        baseline_bytes = accelerate_estimate(case)
        baseline_error = "n/a" if baseline_bytes is None else f"{(baseline_bytes - measured) / measured:+.0%}"
        batch = case.batch_size if case.accumulation == 1 else f"{case.batch_size} x {case.accumulation}"
        print(f"| {case.name} | {case.optimizer} | {case.precision} | {batch} | {megabytes(predicted)} | "
              f"{megabytes(measured)} | {predicted - measured:+,} | {error:+.2%} | {megabytes(baseline_bytes)} | "
              f"{baseline_error} |")
    verdict = "met" if max(errors) <= 0.10 else "NOT met"
    print(f"largest |error| {max(errors):.2%}, median {sorted(errors)[len(errors) // 2]:.2%}: "
          f"target ±10% on every case {verdict}")


if __name__ == "__main__":
    main()
