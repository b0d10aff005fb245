"""`gpufeed plan --check`: run the planned step for real on the device here and compare with the plan.

Measured independently of the planner's tracing: on CUDA the allocator's own peak
(`torch.cuda.max_memory_allocated`, which leaves out the CUDA context the plan adds as overhead). On the CPU
only the step time is checked here; benchmarks/plan_accuracy.py compares memory through the profiler.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from gpufeed.plan.memory import CUDA_CONTEXT_BYTES
from gpufeed.plan.run import Plan, model_factory

OPTIMIZER_CLASSES = {"sgd": lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                     "adam": lambda p: torch.optim.Adam(p, lr=1e-3), "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3)}
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _step(model, optimizer, inputs, labels, precision: str, device: torch.device) -> None:
    optimizer.zero_grad(set_to_none=True)
    dtype = AUTOCAST.get(precision)
    with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        loss = F.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()


def check_plan(plan: Plan, steps: int = 3) -> dict:
    """Predicted against measured peak memory and step time on the device present (CUDA, else the CPU)."""
    request = plan.request
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float64 if request.precision == "fp64" else torch.float32
    factory = model_factory(request.model, request.input_shape, request.num_classes)
    timings: list[float] = []

    def run_steps() -> None:  # everything is allocated in here, so the CPU profiler sees all of it
        model = factory().to(device, dtype)
        optimizer = OPTIMIZER_CLASSES[request.optimizer](model.parameters())
        inputs = torch.randn(request.batch_size, *request.input_shape, device=device, dtype=dtype)
        labels = torch.randint(0, request.num_classes, (request.batch_size,), device=device)
        for _ in range(steps):
            started = time.perf_counter()
            _step(model, optimizer, inputs, labels, request.precision, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
            timings.append(time.perf_counter() - started)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        run_steps()
        measured = torch.cuda.max_memory_allocated(device)
        predicted = plan.memory.peak_bytes - CUDA_CONTEXT_BYTES  # the allocator counts its rounding, not the context
        how = "torch.cuda.max_memory_allocated (without the CUDA context)"
    else:
        run_steps()
        measured, predicted = None, None
        how = ("not measured on the CPU by --check (the CPU allocator keeps no peak statistic); "
               "benchmarks/plan_accuracy.py measures it through the profiler")
    step_s = sorted(timings)[len(timings) // 2]
    error = (predicted - measured) / measured if measured else None
    memory_line = (f"peak memory on {device}: predicted {predicted / 2**20:,.1f} MiB, measured "
                   f"{measured / 2**20:,.1f} MiB ({error:+.1%}; {how})" if measured else f"peak memory: {how}")
    lines = [memory_line,
             f"step time on {device}: {step_s * 1e3:,.1f} ms measured (median of {steps}), "
             f"{request.batch_size / step_s:,.0f} samples/s"]
    return {"device": str(device), "predicted_peak_bytes": predicted, "measured_peak_bytes": measured,
            "error_fraction": error, "measured_step_s": step_s, "method": how, "lines": lines}
