"""The summary of `gpufeed bench`: sentences a person reads in ten seconds, from a BenchResult's figures."""

from __future__ import annotations

from gpufeed.bench.busy import busy_sentence
from gpufeed.bench.gpu_answer import answer_sentence
from gpufeed.bench.link import link_advice
from gpufeed.bench.results import BenchResult, KernelResult, TrainStepResult
from gpufeed.hardware.peak import Peak
from gpufeed.units import fixed


def _best(kernels: list[KernelResult], device: str, precision: str, op: str = "matmul") -> KernelResult | None:
    candidates = [k for k in kernels if k.device == device and k.precision == precision and k.op == op]
    return max(candidates, key=lambda k: k.tflops, default=None)


def summarised_kernels(kernels: list[KernelResult], devices: list[str]) -> list[KernelResult]:
    """The kernels the summary's sentences rest on: each device's best matrix product in its precision (fp32 on the
    CPU, bf16 on a GPU) and, with a GPU beside the CPU, every fp32 matrix product of both (the crossover)."""
    named = [_best(kernels, device, "fp32" if device == "cpu" else "bf16") for device in devices]
    if "cpu" in devices and len(devices) > 1:
        named += [k for k in kernels if k.precision == "fp32" and k.op == "matmul"]
    chosen = {id(kernel) for kernel in named if kernel is not None}
    return [kernel for kernel in kernels if id(kernel) in chosen]


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
            f"fp32 ({best.precision}, batch {best.batch_size}: {fixed(best.samples_per_s, 0, 'samples/s')}).")


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


def _peak_sentence(kernels: list[KernelResult], peaks: list[Peak], device: str, precision: str) -> str | None:
    best = _best(kernels, device, precision)
    if best is None:
        return None
    peak = next((p for p in peaks if (p.device, p.precision) == (device, precision)), None)
    bound = "" if peak is None else peak.bound_word(of_peak=True)
    clock = "" if peak is None or peak.clock is None else f" at the {peak.clock} clock, {peak.clock_mhz / 1000:.2f} GHz"
    share = ("" if best.fraction_of_peak is None else
             f", {bound}{best.fraction_of_peak:.0%} of its {precision} peak{clock}")
    return f"{device} reached {best.tflops:.2f} TFLOP/s in {precision} matrix products ({best.size}{share})."


def summarise(result: BenchResult) -> list[str]:
    """Sentences a person reads in ten seconds: whether the figures are reliable, what a GPU does or would do for
    the CNN step, lower precisions, each device against its peak, fp64 against fp32, and the link's advice."""
    busy = result.machine_busy
    sentences = [busy_sentence(busy) if busy is not None and busy.busy else None,
                 _step_sentence(result.train_steps),
                 None if result.gpu_estimate is None else answer_sentence(result.gpu_estimate),
                 _precision_sentence(result.train_steps)]
    devices = result.settings["devices"]
    for device in devices:
        precision = "fp32" if device == "cpu" else "bf16"
        sentences.append(_peak_sentence(result.kernels, result.peaks, device, precision))
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
    return [sentence for sentence in sentences if sentence] + link_advice(result.link)
