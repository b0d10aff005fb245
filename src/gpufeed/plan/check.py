"""`gpufeed plan --check`: run the planned step for real on the device here and compare with the plan.

The step is train/step.py's, run as the plan traced it: the loop it planned (micro-batches included), our own
models in channels_last with bf16 batches under bf16 as `gpufeed train` feeds them, a user's model as a plain
loop. Its peak memory is measured by a path that shares nothing with the planner's tracing:
- CUDA: the allocator's own peak, `torch.cuda.max_memory_allocated` (it leaves out the CUDA context, which the
  plan adds as overhead, so the context is taken off the prediction);
- CPU: the steps run under `torch.profiler.profile(profile_memory=True)`; the CPU allocator reports every
  allocation and free, and model, optimizer and batch are all allocated inside the profile, so the running sum
  of those events is the live total; the peak is its maximum within the steps after the first (the first
  creates the optimizer state). The prediction is then the plan's trace for the CPU (CPU optimizer defaults
  and autocast rules, no CUDA context or rounding).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from gpufeed.hardware.catalog import find_gpu
from gpufeed.hardware.na import NA, is_na
from gpufeed.hardware.tf32 import tf32_flags
from gpufeed.measure.quiet import without_kineto_noise
from gpufeed.plan.compute import efficiency_of
from gpufeed.plan.memory import CUDA_CONTEXT_BYTES, estimate_memory
from gpufeed.plan.rank import planned_precision
from gpufeed.plan.roofline import step_time
from gpufeed.plan.run import Plan, model_factory, trace_options
from gpufeed.plan.traffic import trace_traffic
from gpufeed.train.step import Precision, TrainStep, make_optimizer, prepare_model, random_batch
from gpufeed.units import bytes_text

STEP_MARK = "gpufeed check step {}"
# the profiler slows small operators; when the profiled run took less than this, the steps are timed again
# without it (a large model's step is timed under it: its operators are long, the profiler's cost is small)
UNPROFILED_RETIME_S = 10.0


def profiled_cpu_peak(run: Callable[[], None], marks: set[str]) -> int | NA:
    """Run `run` under the profiler with memory events; the largest live total of the CPU allocator while a
    `record_function` range named in `marks` was open. An exception of `run` propagates; a trace that cannot be
    read (a torch without these profiler internals, no marked range recorded) is NA with the reason."""
    from torch.profiler import ProfilerActivity, profile

    with without_kineto_noise(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        run()
    try:
        from torch._C._profiler import _EventType

        events, pending = [], list(profiler.profiler.kineto_results.experimental_event_tree())
        while pending:
            event = pending.pop()
            events.append(event)
            pending.extend(event.children)
        windows = [(event.start_time_ns, event.end_time_ns) for event in events if event.name in marks]
        allocations = sorted((e for e in events if e.tag == _EventType.Allocation), key=lambda e: e.start_time_ns)
        sizes = [(event.start_time_ns, event.extra_fields.alloc_size) for event in allocations]
    except (AttributeError, ImportError, RuntimeError) as error:
        return NA(f"the profiler's memory events could not be read in torch {torch.__version__} ({error})")
    if not windows:
        return NA(f"none of the marked ranges {sorted(marks)} was recorded by the profiler")
    live, peak = 0, 0
    for start_ns, size in sizes:
        live += size  # negative for a free
        if any(start <= start_ns <= end for start, end in windows):
            peak = max(peak, live)
    return peak


def measured_peak(run: Callable[[], None], device: torch.device, steps: int,
                  timings: list[float]) -> tuple[int | NA, bool]:
    """The peak bytes of `run` (which appends each step's seconds to `timings`, each step inside a STEP_MARK range)
    and whether `timings` were taken under the profiler. CUDA: `max_memory_allocated` over the run. CPU: the
    allocator's live total in steps 2 on (`profiled_cpu_peak`); a run the profiler slowed by less than
    UNPROFILED_RETIME_S is run again without it, for its times."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        run()
        return torch.cuda.max_memory_allocated(device), False
    started = time.perf_counter()
    measured = profiled_cpu_peak(run, {STEP_MARK.format(step) for step in range(1, steps)})
    if time.perf_counter() - started >= UNPROFILED_RETIME_S and not is_na(measured):
        return measured, True
    timings.clear()
    run()
    return measured, False


def _planned_step(plan: Plan, device: torch.device) -> str:
    """', planned X ms (band) for <card>' when this device is a catalog GPU, else ''."""
    spec = find_gpu(torch.cuda.get_device_name(device)) if device.type == "cuda" else None
    if spec is None or is_na(spec):
        return ""
    request = plan.request
    precision, _ = planned_precision(spec, request.precision)
    traffic = trace_traffic(model_factory(request.model, request.input_shape, request.num_classes),
                            request.input_shape, request.batch_size, request.num_classes, precision,
                            request.optimizer, **trace_options(request, precision))
    planned = step_time(traffic, spec, efficiency_of(plan.compute), request.grad_accumulation)
    if is_na(planned):
        return f"; not planned for {spec.name} ({planned.reason})"
    return (f"; planned {planned.seconds * 1e3:,.1f} ms ({planned.seconds_fast * 1e3:,.1f}-"
            f"{planned.seconds_slow * 1e3:,.1f}) for {spec.name} in {precision}")


def check_plan(plan: Plan, steps: int = 3) -> dict:
    """Predicted against measured peak memory and step time on the device present (CUDA, else the CPU)."""
    from torch.profiler import record_function

    request = plan.request
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = Precision(request.precision, "planned")
    options = trace_options(request)
    channels_last = bool(options.get("channels_last")) and len(request.input_shape) == 3
    input_dtype = options.get("input_dtype") or precision.parameter_dtype
    factory = model_factory(request.model, request.input_shape, request.num_classes)
    accumulation = request.grad_accumulation
    timings: list[float] = []

    def run_steps() -> None:  # everything is allocated in here, so the CPU profiler sees all of it
        model = prepare_model(factory(), precision, device, channels_last)
        step = TrainStep(model, make_optimizer(request.optimizer, model.parameters()), precision, device.type,
                         scaler=precision.scaler(device.type))
        inputs, labels = random_batch(request.batch_size, request.input_shape, request.num_classes, device,
                                      input_dtype, channels_last)
        for index in range(steps):
            started = time.perf_counter()
            with record_function(STEP_MARK.format(index)):
                step.accumulate([(inputs, labels)] * accumulation, accumulation)
            if device.type == "cuda":
                torch.cuda.synchronize()
            timings.append(time.perf_counter() - started)

    def run_with_flags() -> None:
        with tf32_flags(device, request.precision):
            run_steps()

    measured, timed_under_profiler = measured_peak(run_with_flags, device, steps, timings)
    if device.type == "cuda":
        predicted = plan.memory.peak_bytes - CUDA_CONTEXT_BYTES  # the allocator counts its rounding, not the context
        how = "torch.cuda.max_memory_allocated (without the CUDA context)"
    else:
        predicted = estimate_memory(factory, request.input_shape, request.batch_size, request.num_classes,
                                    optimizer=request.optimizer, device_type="cpu",
                                    precision="fp32" if request.precision == "tf32" else request.precision,
                                    grad_accumulation=accumulation, **options).peak_bytes
        how = ("the CPU allocator's live total under torch.profiler(profile_memory=True), steps 2 on, against the "
               "plan traced for the CPU (no CUDA context)")
        if is_na(measured):
            measured, how = None, f"not measured: {measured.reason}"
    step_s = sorted(timings)[len(timings) // 2]
    rate = f"{request.batch_size * accumulation / step_s:,.0f} samples/s{_planned_step(plan, device)}"
    return check_result(device, predicted, measured, how, step_s, steps, rate, timed_under_profiler)


def check_result(device: torch.device, predicted: int, measured: int | None, how: str, step_s: float, steps: int,
                 rate: str, timed_under_profiler: bool) -> dict:
    """The `check` block of a plan's document (image and language models): predicted against measured peak,
    the step's median time and `rate` (its throughput in words), and the lines the command line prints."""
    error = (predicted - measured) / measured if measured else None
    predicted_text = f"peak memory on {device}: predicted {bytes_text(predicted, 'MiB', 1)}"
    memory_line = (f"{predicted_text}, measured {bytes_text(measured, 'MiB', 1)} ({error:+.1%}; {how})" if measured
                   else f"{predicted_text}, {how}")
    timing_note = " under the profiler" if timed_under_profiler else ""
    lines = [memory_line, f"step time on {device}: {step_s * 1e3:,.1f} ms measured{timing_note} (median of {steps}), "
                          f"{rate}"]
    return {"device": str(device), "predicted_peak_bytes": predicted, "measured_peak_bytes": measured,
            "error_fraction": error, "measured_step_s": step_s, "method": how, "lines": lines}
