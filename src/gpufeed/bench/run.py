"""`run_bench`: CPU against GPU on this machine, and what the figures mean, as one `BenchResult`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpufeed.bench.kernels import conv_benchmark, matmul_sweep
from gpufeed.bench.link import link_advice, measure_link
from gpufeed.bench.peak import cpu_peaks, gpu_peaks
from gpufeed.bench.results import PRECISIONS, BenchResult, KernelResult, Peak, TrainStepResult
from gpufeed.bench.steps import precision_runs, train_step_benchmark
from gpufeed.errors import ConfigError
from gpufeed.hardware.devices import resolve_device
from gpufeed.hardware.probe import probe_cpu, probe_machine

QUICK_CPU_SIZES = (128, 256, 512, 1024)
FULL_CPU_SIZES = (128, 256, 512, 1024, 2048)
QUICK_GPU_SIZES = (256, 1024, 4096, 8192)
FULL_GPU_SIZES = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


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


def run_bench(devices: list[torch.device], precisions: tuple[str, ...], quick: bool = True,
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Kernels, training steps, the link and a short training per precision, on each device."""
    say = progress or (lambda message: None)
    say("probing the machine")
    machine = probe_machine()
    peaks = _peaks(devices)
    peak_of = {(peak.device, peak.precision): peak.tflops for peak in peaks}
    kernels: list[KernelResult] = []
    steps: list[TrainStepResult] = []
    links, runs, unmeasured = [], [], list(machine.unmeasured)
    for device in devices:
        gpu = device.type == "cuda"
        if gpu:
            sizes = QUICK_GPU_SIZES if quick else FULL_GPU_SIZES
        else:
            sizes = QUICK_CPU_SIZES if quick else FULL_CPU_SIZES
        say(f"matrix products on {device}")
        found, missing = matmul_sweep(device, precisions, sizes, peak_of, repeats=5 if quick else 20)
        kernels += found
        unmeasured += missing
        say(f"convolution on {device}")
        found, missing = conv_benchmark(device, precisions, peak_of, repeats=5 if quick else 20)
        kernels += found
        unmeasured += missing
        say(f"host-device link of {device}")
        found, missing = measure_link(device, repeats=5 if quick else 20)
        links += found
        unmeasured += missing
    for device in devices:
        say(f"training steps on {device}")
        chosen = precisions
        if device.type == "cpu" and "fp16" in precisions:
            # CPU fp16 training is emulated: a CNN step took minutes-long fractions of a minute, not milliseconds
            chosen = tuple(p for p in precisions if p != "fp16")
            unmeasured.append("fp16 training steps on the CPU: without native fp16 training support the step is "
                              "emulated and runs hundreds of times slower than fp32; not run")
        found, missing = train_step_benchmark(devices=[device], precisions=chosen,
                                              batch_sizes=(64, 256) if quick else (64, 256, 1024),
                                              repeats=3 if quick else 10)
        steps += found
        unmeasured += missing
    steps = _with_speedups(steps)
    fastest = devices[-1]
    say(f"short trainings in each precision on {fastest}")
    chosen = tuple(p for p in ("fp64", "fp32", "bf16") if p in precisions or p == "fp32")
    found, missing = precision_runs(fastest, chosen, count=2000 if quick else 10000, epochs=2)
    runs += found
    unmeasured += missing
    result = BenchResult(machine=machine, settings={"devices": [str(d) for d in devices],
                                                    "precisions": list(precisions), "quick": quick},
                         kernels=kernels, peaks=peaks, train_steps=steps, link=links, precision_runs=runs,
                         unmeasured=unmeasured)
    return BenchResult(**{**result.__dict__, "summary": summarise(result) + link_advice(links)})


def _with_speedups(steps: list[TrainStepResult]) -> list[TrainStepResult]:
    """Each step's speed over the CPU's fp32 figure for the same model and batch (measured per device above)."""
    from dataclasses import replace

    baseline = {(s.model, s.batch_size): s.samples_per_s for s in steps if s.device == "cpu" and s.precision == "fp32"}
    return [replace(s, speedup_vs_cpu_fp32=(s.samples_per_s / baseline[(s.model, s.batch_size)]
                                            if (s.model, s.batch_size) in baseline else None)) for s in steps]


def _best(kernels: list[KernelResult], device: str, precision: str, op: str = "matmul") -> KernelResult | None:
    candidates = [k for k in kernels if k.device == device and k.precision == precision and k.op == op]
    return max(candidates, key=lambda k: k.tflops, default=None)


def _crossover(kernels: list[KernelResult], gpu: str) -> str | None:
    """The smallest matrix size at which the GPU beats the CPU in fp32."""
    cpu = {k.size: k.tflops for k in kernels if k.device == "cpu" and k.precision == "fp32" and k.op == "matmul"}
    for kernel in sorted((k for k in kernels if k.device == gpu and k.precision == "fp32" and k.op == "matmul"),
                         key=lambda k: k.flops):
        if kernel.size in cpu and kernel.tflops > cpu[kernel.size]:
            return kernel.size
    return None


def _step_sentence(steps: list[TrainStepResult]) -> str | None:
    """The largest speed-up over the CPU in fp32 for the CNN, with its device and precision."""
    faster = [s for s in steps if s.model == "cnn" and s.speedup_vs_cpu_fp32 is not None and s.device != "cpu"]
    if not faster:
        return None
    best = max(faster, key=lambda s: s.speedup_vs_cpu_fp32)
    return (f"On this machine {best.device} trains the CNN {best.speedup_vs_cpu_fp32:.1f}x faster than the CPU in "
            f"fp32 ({best.precision}, batch {best.batch_size}: {best.samples_per_s:,.0f} samples/s).")


def _precision_sentence(steps: list[TrainStepResult]) -> str | None:
    """How much the fastest lower precision gains over fp32 for the CNN on the same device and batch."""
    fp32 = {(s.device, s.batch_size): s.samples_per_s for s in steps if s.model == "cnn" and s.precision == "fp32"}
    gains = [(s.samples_per_s / fp32[(s.device, s.batch_size)], s) for s in steps
             if s.model == "cnn" and s.precision in ("bf16", "fp16", "tf32") and (s.device, s.batch_size) in fp32]
    if not gains:
        return None
    gain, step = max(gains, key=lambda pair: pair[0])
    return (f"On {step.device}, {step.precision} training steps of the CNN ran {gain:.1f}x as fast as fp32 "
            f"(batch {step.batch_size}).")


def _peak_sentence(kernels: list[KernelResult], device: str, precision: str) -> str | None:
    best = _best(kernels, device, precision)
    if best is None:
        return None
    share = "" if best.fraction_of_peak is None else f", {best.fraction_of_peak:.0%} of its {precision} peak"
    return f"{device} reached {best.tflops:.2f} TFLOP/s in {precision} matrix products ({best.size}{share})."


def summarise(result: BenchResult) -> list[str]:
    """Sentences a person reads in ten seconds."""
    sentences = [_step_sentence(result.train_steps), _precision_sentence(result.train_steps)]
    devices = result.settings["devices"]
    for device in devices:
        precision = "fp32" if device == "cpu" else "bf16"
        sentences.append(_peak_sentence(result.kernels, device, precision))
        if device != "cpu" and "cpu" in devices:
            size = _crossover(result.kernels, device)
            sentences.append(f"The GPU overtakes the CPU at matrix size {size} in fp32." if size else
                             "In this sweep the GPU never overtook the CPU in fp32 matrix products.")
    by_precision = {run.precision: run for run in result.precision_runs}
    if "fp64" in by_precision and "fp32" in by_precision:
        double, single = by_precision["fp64"], by_precision["fp32"]
        sentences.append(f"fp64 took {double.seconds / single.seconds:.1f}x the time of fp32 for "
                         f"{double.validation_accuracy:.1%} against {single.validation_accuracy:.1%} accuracy: "
                         f"single precision suffices.")
    sentences.append("These results stay on this machine: gpufeed uploads nothing.")
    return [sentence for sentence in sentences if sentence]



def peaks_by_device(peaks: list[Peak]) -> tuple[dict, dict]:
    """({device: {precision: TFLOP/s or None}}, {device: {precision: derivation}}) for the JSON output."""
    values: dict = {}
    derivations: dict = {}
    for peak in peaks:
        values.setdefault(peak.device, {})[peak.precision] = peak.tflops
        derivations.setdefault(peak.device, {})[peak.precision] = peak.derivation
    return values, derivations
