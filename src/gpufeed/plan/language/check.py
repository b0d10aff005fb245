"""`gpufeed plan --check` for a language model: run the planned step for real here and compare its peak memory with
the plan's.

The model is built as the plan builds it (plan/language/model.py, on the meta device, LoRA and checkpointing
applied), then given real weights on this device in the plan's dtypes (trained parameters in the precision's, a
frozen base in `--frozen-dtype`, tied weights kept tied) and trained for a few steps by train/step.py's step with
the model's own loss, on random token ids (B, N). The peak is measured as `plan --check` measures an image
model's (plan/check.py): the CPU allocator's events under the profiler, steps 2 on, against the plan traced for
the CPU; or `torch.cuda.max_memory_allocated` against the plan less the CUDA context.

Two of the planned settings are layouts, not code that runs here, and are refused: QLoRA's 4-bit base
(plan/language/nf4.py, bitsandbytes' layout) and AdamW 8-bit's state (plan/optimizers.py). A step that would not fit in
this machine's free memory is refused before anything is allocated.
"""

from __future__ import annotations

import time

import psutil
import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.hardware.na import is_na
from gpufeed.plan.check import STEP_MARK, check_result, measured_peak
from gpufeed.plan.fake_model import fake_weights
from gpufeed.plan.language.model import FineTune, LanguageModel, build_language_model, transformers_quiet
from gpufeed.plan.memory import CUDA_CONTEXT_BYTES, estimate_language_memory
from gpufeed.plan.optimizers import make_plan_optimizer
from gpufeed.train.step import Precision, TrainStep
from gpufeed.units import bytes_text

# of the memory free here, the share a check may plan to use (the rest: this process, the profiler's records)
FREE_SHARE = 0.8
NOT_RUN = {"qlora": "QLoRA's 4-bit base is planned from bitsandbytes' layout (plan/language/nf4.py), not run here",
           "adamw-8bit": "AdamW 8-bit's state is planned from bitsandbytes' layout (plan/optimizers.py), not run here"}


def real_language_model(language_model: LanguageModel, tune: FineTune, precision: str,
                        frozen_dtype: torch.dtype | None, device: torch.device) -> nn.Module:
    """The model as the plan builds it, with real weights on `device` in the plan's dtypes: floating parameters
    drawn from N(0, 0.02), then, for a transformers model, its own initializer (`initialize_weights`: norms, the
    rotary tables, Gemma's embedding scale); a factory's buffers other than floating ones are zero."""
    model = build_language_model(language_model, tune)[0]
    fake_weights(model, device, Precision(precision, "").parameter_dtype, False, frozen_dtype)  # real: no fake mode
    generator = torch.Generator(device="cpu").manual_seed(0)
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            values = torch.randn(tensor.shape, generator=generator) * 0.02
            tensor.copy_(values.to(tensor.dtype) if tensor.is_floating_point() else torch.zeros_like(tensor))
    pretrained = next((module for module in model.modules()
                       if hasattr(module, "initialize_weights") and hasattr(module, "_init_weights")), None)
    if pretrained is not None:  # it marked its modules initialized when built on meta
        for module in model.modules():
            module.__dict__.pop("_is_hf_initialized", None)
        pretrained.initialize_weights()
    return model.train()


def _vocabulary(model: nn.Module) -> int:
    """The token ids the model takes: its input embeddings' rows (the first nn.Embedding of a factory's model)."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not isinstance(embeddings, nn.Embedding):
        embeddings = next((module for module in model.modules() if isinstance(module, nn.Embedding)), None)
    if embeddings is None:
        raise ConfigError("--check needs the model's token embeddings (an nn.Embedding) to draw token ids from")
    return embeddings.num_embeddings


def run_language_steps(model: nn.Module, optimizer: str, precision: str, device: torch.device, batch_size: int,
                       sequence_length: int, grad_accumulation: int, steps: int) -> list[float]:
    """`steps` optimizer steps of train/step.py's step with the model's own loss on random token ids, each inside a
    `record_function(STEP_MARK)` range; the seconds of each."""
    from torch.profiler import record_function

    chosen = Precision(precision, "planned")
    trained = [parameter for parameter in model.parameters() if parameter.requires_grad]
    step = TrainStep(model, make_plan_optimizer(optimizer, trained), chosen, device.type,
                     scaler=chosen.scaler(device.type), loss="model")
    generator = torch.Generator(device="cpu").manual_seed(1)
    tokens = torch.randint(0, _vocabulary(model), (batch_size, sequence_length), generator=generator).to(device)
    timings = []
    for index in range(steps):
        started = time.perf_counter()
        with record_function(STEP_MARK.format(index)):
            step.accumulate([(tokens, tokens)] * grad_accumulation, grad_accumulation)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        timings.append(time.perf_counter() - started)
    return timings


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return psutil.virtual_memory().available


def refuse_unrunnable(method: str, optimizer: str) -> None:
    """A ConfigError when the planned step cannot run here as planned (NOT_RUN): before the plan is made."""
    for setting in (method, optimizer):
        if setting in NOT_RUN:
            raise ConfigError(f"--check runs the step for real: {NOT_RUN[setting]}; check --method lora or "
                              f"--optimizer adamw instead")


@transformers_quiet()
def check_language_plan(plan, steps: int = 3) -> dict:
    """Predicted against measured peak memory, and the measured step time, of `plan` (a LanguagePlan) on the
    device here (CUDA, else the CPU); the same keys as plan/check.py's `check_plan`."""
    from gpufeed.plan.language.model import resolve_language_model
    from gpufeed.plan.language.run import FROZEN_DTYPES

    request = plan.request
    refuse_unrunnable(request.tune.method, request.optimizer)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    language_model = resolve_language_model(request.model)
    frozen = FROZEN_DTYPES[request.frozen_dtype] if request.tune.method != "full" else None
    length, batch = plan.sequence_length, request.batch_size
    if device.type == "cuda":
        predicted = plan.memory.peak_bytes - CUDA_CONTEXT_BYTES
        how = "torch.cuda.max_memory_allocated (without the CUDA context)"
    else:
        predicted = estimate_language_memory(lambda: build_language_model(language_model, request.tune)[0], length,
                                             batch, request.optimizer, request.precision, "cpu",
                                             frozen_dtype=frozen,
                                             grad_accumulation=request.grad_accumulation).peak_bytes
        how = ("the CPU allocator's live total under torch.profiler(profile_memory=True), steps 2 on, against the "
               "plan traced for the CPU (no CUDA context)")
    free = _free_bytes(device)
    if predicted > FREE_SHARE * free:
        raise ConfigError(f"--check would need {bytes_text(predicted, 'MiB', 0)} on {device}, "
                          f"{bytes_text(free, 'MiB', 0)} is free here: check a smaller model, --batch-size or "
                          f"--seq-len")
    timings: list[float] = []

    def run() -> None:  # everything is allocated in here, so the CPU profiler sees all of it
        model = real_language_model(language_model, request.tune, request.precision, frozen, device)
        timings.extend(run_language_steps(model, request.optimizer, request.precision, device, batch, length,
                                          request.grad_accumulation, steps))

    measured, timed_under_profiler = measured_peak(run, device, steps, timings)
    if is_na(measured):
        measured, how = None, f"not measured: {measured.reason}"
    step_s = sorted(timings)[len(timings) // 2]
    rate = f"{batch * length * request.grad_accumulation / step_s:,.0f} tokens/s"
    return check_result(device, predicted, measured, how, step_s, steps, rate, timed_under_profiler)
