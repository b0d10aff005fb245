"""`run_bench`: CPU against GPU on this machine, and what the figures mean, as one `BenchResult`.

The order: training steps first (the summary's answer rests on the CNN step), then matrix products, the
convolution and the link per device, then short trainings per precision; over the whole window, whether the
machine was busy (busy.py); with no GPU benchmarked, the planner's speed-up on the catalog's GPUs (gpu_answer.py).
`--quick` is the QUICK sweep under a time budget (budget.py): what it gives up is what QUICK leaves out of FULL.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpufeed.bench.budget import NO_BUDGET, QUICK_KERNELS_S, QUICK_MEASUREMENT_S, QUICK_STEPS_S, Budget
from gpufeed.bench.busy import judge, read_cpu, usable_cores
from gpufeed.bench.gpu_answer import ANSWER_BATCH, cpu_step_to_beat, estimate_gpus
from gpufeed.bench.kernels import conv_benchmark, matmul_sweep, with_fractions_of_peak
from gpufeed.bench.link import measure_link
from gpufeed.bench.results import BenchResult, GpuAnswer, KernelResult, PrecisionRun, TrainStepResult
from gpufeed.bench.steps import precision_runs, train_step_benchmark
from gpufeed.bench.summary import summarise, summarised_kernels
from gpufeed.errors import ConfigError
from gpufeed.hardware.devices import resolve_device
from gpufeed.hardware.na import is_na
from gpufeed.hardware.peak import Peak, cpu_peaks, gpu_peaks, peak_table, proven_peaks
from gpufeed.hardware.precisions import PRECISIONS
from gpufeed.hardware.probe import MachineInfo, probe_cpu, probe_machine

Say = Callable[[str], None]
# The order kernels are measured in: what the summary reports first, so that a spent quick budget drops fp64 first.
KERNEL_ORDER = ("fp32", "bf16", "tf32", "fp16", "fp64")


@dataclass(frozen=True)
class Sweep:
    """What one bench measures. Sizes are matrix sides n (n x n times n x n); batches are training-step batches."""

    cpu_sizes: tuple[int, ...]
    gpu_sizes: tuple[int, ...]
    kernel_repeats: int  # timed calls per matmul size and convolution (more for calls under 50 ms in all)
    kernel_warmup: int
    max_call_s: float  # larger matmul sizes predicted to take longer per call are skipped
    cpu_batches: tuple[int, ...]
    gpu_batches: tuple[int, ...]
    step_repeats: int
    step_warmup: int
    cpu_fp64_steps: bool  # fp64 training steps on the CPU (a CNN step there takes seconds)
    precision_run_samples: int  # samples of each short training (2 epochs)
    precision_runs_on_cpu: bool  # short trainings when the CPU is the fastest device (about 30 s each on 2 cores)


QUICK = Sweep(cpu_sizes=(128, 256, 512, 1024), gpu_sizes=(256, 1024, 4096, 8192), kernel_repeats=5, kernel_warmup=2,
              max_call_s=0.5, cpu_batches=(ANSWER_BATCH,), gpu_batches=(64, ANSWER_BATCH), step_repeats=3,
              step_warmup=1, cpu_fp64_steps=False, precision_run_samples=2000, precision_runs_on_cpu=False)
FULL = Sweep(cpu_sizes=(128, 256, 512, 1024, 2048), gpu_sizes=(128, 256, 512, 1024, 2048, 4096, 8192, 16384),
             kernel_repeats=20, kernel_warmup=3, max_call_s=2.0, cpu_batches=(64, ANSWER_BATCH, 1024),
             gpu_batches=(64, ANSWER_BATCH, 1024), step_repeats=10, step_warmup=3, cpu_fp64_steps=True,
             precision_run_samples=10000, precision_runs_on_cpu=True)


def parse_devices(text: str) -> list[torch.device]:
    """'all' = the CPU and every CUDA GPU; otherwise a comma-separated list such as 'cpu,cuda:0'."""
    if text == "all":
        return [torch.device("cpu")] + [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    return [resolve_device(part.strip()) for part in text.split(",") if part.strip()]


def parse_precisions(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in chosen if name not in PRECISIONS]
    if unknown or not chosen:
        raise ConfigError(f"unknown precision {', '.join(unknown) or repr(text)}; choose from {','.join(PRECISIONS)}")
    return chosen


def _peaks(devices: list[torch.device]) -> list[Peak]:
    peaks: list[Peak] = []
    for device in devices:
        if device.type == "cpu":
            peaks += cpu_peaks(probe_cpu())
        elif device.type == "cuda":
            peaks += gpu_peaks(torch.cuda.get_device_name(device), device=str(device))
    return peaks


def _step_precisions(device: torch.device, precisions: tuple[str, ...], sweep: Sweep,
                     unmeasured: list[str]) -> tuple[str, ...]:
    if device.type != "cpu":
        return precisions
    chosen = precisions
    if "fp16" in chosen:  # CPU fp16 training is emulated: a CNN step takes seconds, not milliseconds
        chosen = tuple(p for p in chosen if p != "fp16")
        unmeasured.append("fp16 training steps on the CPU: without native fp16 training support the step is "
                          "emulated and runs hundreds of times slower than fp32; not run")
    if "fp64" in chosen and not sweep.cpu_fp64_steps:
        chosen = tuple(p for p in chosen if p != "fp64")
        unmeasured.append("fp64 training steps on the CPU: left out by --quick (a CNN step takes seconds; the fp64 "
                          "matrix products and convolution show its rate)")
    return chosen


def _budget(quick: bool, seconds: float, what: str) -> Budget:
    return Budget.quick(seconds, what) if quick else NO_BUDGET


def _steps(devices, precisions, sweep: Sweep, quick: bool, say: Say, unmeasured: list[str]) -> list:
    steps: list[TrainStepResult] = []
    for device in devices:
        say(f"training steps on {device}")
        chosen = _step_precisions(device, precisions, sweep, unmeasured)
        if not chosen:
            continue
        budget = _budget(quick, QUICK_STEPS_S, f"training steps on {device}")
        found, missing = train_step_benchmark(devices=[device], precisions=chosen, repeats=sweep.step_repeats,
                                              batch_sizes=sweep.cpu_batches if device.type == "cpu"
                                              else sweep.gpu_batches, warmup=sweep.step_warmup, budget=budget)
        steps += found
        unmeasured += missing
    return _with_speedups(steps)


def _table_order(kernel: KernelResult) -> tuple[int, int]:
    """Kernels are shown in PRECISIONS order, sizes rising, whatever order they were measured in."""
    return PRECISIONS.index(kernel.precision), kernel.flops


def _kernels(devices, precisions, sweep: Sweep, quick: bool, peaks: list[Peak], say: Say,
             unmeasured: list[str]) -> tuple[list[KernelResult], list]:
    kernels, links, peak_of = [], [], peak_table(peaks)
    ordered = [p for p in KERNEL_ORDER if p in precisions] + [p for p in precisions if p not in KERNEL_ORDER]
    for device in devices:
        say(f"matrix products on {device}")
        budget = _budget(quick, QUICK_KERNELS_S, f"matrix products and convolutions on {device}")
        timing = {"repeats": sweep.kernel_repeats, "warmup": sweep.kernel_warmup, "budget": budget}
        sizes = sweep.gpu_sizes if device.type == "cuda" else sweep.cpu_sizes
        found, missing = matmul_sweep(device, ordered, sizes, peak_of, max_call_s=sweep.max_call_s, **timing)
        kernels += sorted(found, key=_table_order)
        unmeasured += missing
        say(f"convolution on {device}")
        found, missing = conv_benchmark(device, ordered, peak_of, **timing)
        kernels += sorted(found, key=_table_order)
        unmeasured += missing
        say(f"host-device link of {device}")
        found, missing = measure_link(device, repeats=sweep.kernel_repeats)
        links += found
        unmeasured += missing
    return kernels, links


def _precision_runs(devices, precisions, sweep: Sweep, say: Say, unmeasured: list[str]) -> list[PrecisionRun]:
    fastest = devices[-1]
    if fastest.type == "cpu" and not sweep.precision_runs_on_cpu:
        unmeasured.append(f"short trainings per precision on {fastest}: left out by --quick on a CPU (three CNN "
                          f"trainings of 62 steps, about 30 s each on 2 cores); run gpufeed bench without --quick")
        return []
    say(f"short trainings in each precision on {fastest}")
    chosen = tuple(p for p in ("fp64", "fp32", "bf16") if p in precisions or p == "fp32")
    found, missing = precision_runs(fastest, chosen, count=sweep.precision_run_samples, epochs=2)
    unmeasured += missing
    return found


def _gpu_answer(devices, machine: MachineInfo, steps, say: Say, unmeasured: list[str]) -> GpuAnswer | None:
    """With no GPU benchmarked, the planner's speed-up of the CPU's CNN step on the catalog's GPUs."""
    if any(device.type == "cuda" for device in devices):
        return None
    step = cpu_step_to_beat(steps)
    if step is None:
        unmeasured.append(f"GPU estimate: no CNN training step at batch {ANSWER_BATCH} was measured on the CPU")
        return None
    say("estimating the step on the catalog's GPUs")
    try:
        answer = estimate_gpus(step, gpu_present=bool(machine.accelerators))
    except (ConfigError, ValueError, OSError, ImportError) as error:  # a bad catalog, an untraceable model, a moved API
        unmeasured.append(f"GPU estimate: {type(error).__name__}: {error}")
        return None
    if is_na(answer):
        unmeasured.append(f"GPU estimate: {answer.reason}")
        return None
    return answer


def _timings(kernels: list[KernelResult], steps: list[TrainStepResult]) -> list[tuple[str, float, float]]:
    """(measurement, fastest s, slowest s) of every kernel and training step, for the spread test."""
    return ([(f"{k.op} {k.precision} {k.size} on {k.device}", k.seconds_min, k.seconds_max) for k in kernels]
            + [(f"the {s.model} {s.precision} training step at batch {s.batch_size} on {s.device}", s.seconds_min,
                s.seconds_max) for s in steps])


def run_bench(devices: list[torch.device], precisions: tuple[str, ...], quick: bool = True,
              progress: Say | None = None) -> BenchResult:
    """Training steps, kernels, the link and a short training per precision on each device, whether the machine
    was busy meanwhile, and with no GPU the planner's estimate of one; `quick` measures QUICK within a budget."""
    say = progress or (lambda message: None)
    sweep = QUICK if quick else FULL
    say("probing the machine")
    machine = probe_machine()
    start = read_cpu()
    peaks, unmeasured = _peaks(devices), list(machine.unmeasured)
    steps = _steps(devices, precisions, sweep, quick, say, unmeasured)
    kernels, links = _kernels(devices, precisions, sweep, quick, peaks, say, unmeasured)
    peaks = proven_peaks(peaks, [(k.device, k.precision, k.tflops, f"{k.op} {k.size}") for k in kernels])
    kernels = with_fractions_of_peak(kernels, peak_table(peaks))
    runs = _precision_runs(devices, precisions, sweep, say, unmeasured)
    used = summarised_kernels(kernels, [str(device) for device in devices])
    named = {id(kernel) for kernel in used}
    busy = judge(start, read_cpu(), usable_cores(), _timings(used, steps),
                 _timings([kernel for kernel in kernels if id(kernel) not in named], []))
    estimate = _gpu_answer(devices, machine, steps, say, unmeasured)
    settings = {"devices": [str(d) for d in devices], "precisions": list(precisions), "quick": quick,
                "sweep": dataclasses.asdict(sweep),
                "budget_s": {"per_measurement": QUICK_MEASUREMENT_S, "training_steps_per_device": QUICK_STEPS_S,
                             "kernels_per_device": QUICK_KERNELS_S} if quick else None}
    result = BenchResult(machine=machine, settings=settings, kernels=kernels, peaks=peaks, train_steps=steps,
                         link=links, precision_runs=runs, unmeasured=unmeasured, machine_busy=busy,
                         gpu_estimate=estimate)
    return dataclasses.replace(result, summary=summarise(result))


def _with_speedups(steps: list[TrainStepResult]) -> list[TrainStepResult]:
    """Each step's speed over the CPU's fp32 figure for the same model and batch (measured per device above)."""
    baseline = {(s.model, s.batch_size): s.samples_per_s for s in steps if s.device == "cpu" and s.precision == "fp32"}
    return [dataclasses.replace(s, speedup_vs_cpu_fp32=(s.samples_per_s / baseline[(s.model, s.batch_size)]
                                                        if (s.model, s.batch_size) in baseline else None))
            for s in steps]


def peaks_by_device(peaks: list[Peak]) -> tuple[dict, dict, dict]:
    """({device: {precision: TFLOP/s or None}}, {device: {precision: derivation}}, {device: {precision: bound}})
    for the JSON output; a bound is "at most", "at least" or "" (`Peak.bound_word`), said of the peak."""
    values: dict = {}
    derivations: dict = {}
    bounds: dict = {}
    for peak in peaks:
        values.setdefault(peak.device, {})[peak.precision] = peak.tflops
        derivations.setdefault(peak.device, {})[peak.precision] = peak.derivation
        bounds.setdefault(peak.device, {})[peak.precision] = peak.bound_word().strip()
    return values, derivations, bounds
