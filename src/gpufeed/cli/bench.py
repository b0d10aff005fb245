"""gpufeed bench: CPU against GPU on this machine, in every precision, against the hardware's peak."""

from __future__ import annotations

import argparse

from rich.table import Table

from gpufeed.bench.busy import busy_sentence
from gpufeed.bench.gpu_answer import factor_text
from gpufeed.cli.output import add_html_flag, add_json_flag, check_output_paths, console, emit_document, error_console
from gpufeed.units import NA, fixed

EXAMPLES = """examples:
  gpufeed bench --quick                         # under a minute on 2 cores, busy or not: fewer sizes and repeats
                                                # within a time budget, no batch 64, no fp64 steps or short
                                                # trainings on a CPU
  gpufeed bench --device cuda:0 --precision bf16,fp16 --json bench.json
  gpufeed bench --quick --html bench.html        # a page: TFLOP/s against size, where the GPU overtakes the CPU
  gpufeed bench                                 # the full sweep: a few minutes

Matrix products count a multiply-add as 2 FLOPs. Peaks are dense (not sparse) rates: the CPU's from its cores,
clock and microarchitecture (the sourced table hardware/cpus.json; without a row, an upper bound from its
instruction set), a GPU's from the sourced table hardware/gpus.json. Other processes' CPU share, steal time and
the spread of repeats are checked over the run: past their limits the summary says the figures are unreliable.
Without a GPU, the summary gives gpufeed plan's estimate of the CNN step on the catalog's GPUs. Nothing is
uploaded.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="CPU against GPU, measured here, against the hardware's peak",
                                   description="Matrix products, a convolution and whole training steps in each "
                                               "precision, the host-device link, and short trainings in fp64, fp32 "
                                               "and bf16.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes and repeats within a time budget (under a minute on 2 cores)")
    parser.add_argument("--device", default="all", help="all (default) | cpu | cuda:0 | a comma-separated list")
    parser.add_argument("--precision", default="fp64,fp32,tf32,bf16,fp16",
                        help="comma-separated: fp64,fp32,tf32,bf16,fp16 (default: all)")
    add_json_flag(parser)
    add_html_flag(parser)
    parser.set_defaults(handler=run)


def _kernel_table(result) -> Table:
    table = Table(title="matrix products and convolution (multiply-add = 2 FLOPs)")
    for column in ("op", "device", "precision", "size", "TFLOP/s", "of peak", "median ms", "spread", "runs"):
        table.add_column(column, justify="right" if column not in ("op", "device", "precision", "size") else "left")
    peaks = {(peak.device, peak.precision): peak for peak in result.peaks}
    for kernel in result.kernels:
        ratio = kernel.spread
        peak = peaks.get((kernel.device, kernel.precision))
        bound = "" if peak is None else {"at most ": "≤", "at least ": "≥"}.get(peak.bound_word(of_peak=True), "")
        table.add_row(kernel.op, kernel.device, kernel.precision, kernel.size, f"{kernel.tflops:.3f}",
                      NA if kernel.fraction_of_peak is None else f"{bound}{kernel.fraction_of_peak:.0%}",
                      f"{kernel.seconds_median * 1e3:.3f}", NA if ratio is None else f"{ratio:.1f}x",
                      str(kernel.runs))
    return table


def _steps_table(result) -> Table:
    table = Table(title="whole training steps (forward, backward, AdamW)")
    for column in ("model", "device", "precision", "batch", "samples/s", "x CPU fp32", "runs"):
        table.add_column(column)
    for step in result.train_steps:
        speedup = NA if step.speedup_vs_cpu_fp32 is None else f"{step.speedup_vs_cpu_fp32:.1f}x"
        table.add_row(step.model, step.device, step.precision, str(step.batch_size), f"{step.samples_per_s:,.0f}",
                      speedup, str(step.runs))
    return table


def _gpu_table(answer) -> Table:
    table = Table(title=f"the {answer.model} step (batch {answer.batch_size}) on catalog GPUs, by gpufeed plan's "
                        f"roofline ({answer.gpu_precision}; band: its efficiency band)")
    for column in ("GPU", "step ms", "band ms", "x this CPU", "band"):
        table.add_column(column, justify="left" if column == "GPU" else "right")
    table.add_row(f"this CPU ({answer.cpu_precision}, measured)", f"{answer.cpu_step_s * 1e3:,.1f}", "", "1", "")
    for e in answer.estimates:
        table.add_row(e.gpu, f"{e.step_s * 1e3:.3f}", f"{e.step_s_low * 1e3:.3f}-{e.step_s_high * 1e3:.3f}",
                      factor_text(e.speedup), f"{factor_text(e.speedup_low)}-{factor_text(e.speedup_high)}")
    return table


def _peak_lines(peaks) -> list[str]:
    """One line a device: each precision's dense peak the 'of peak' column divides by; how each was derived is in
    --json and the page."""
    by_device: dict[str, list[str]] = {}
    for peak in peaks:
        value = NA if peak.tflops is None else f"{peak.bound_word()}{peak.tflops:.3f}"
        by_device.setdefault(peak.device, []).append(f"{peak.precision} {value}")
    return [f"peaks on {device}, TFLOP/s: {', '.join(values)} (derivations: --json or --html)"
            for device, values in by_device.items()]


def _show(result) -> None:
    console.print(_kernel_table(result))
    console.print(_steps_table(result))
    for link in result.link:
        theory = fixed(link.theoretical_gb_per_s, 1, grouped=False)
        console.print(f"link {link.direction} {'pinned' if link.pinned else 'pageable'}: "
                      f"{fixed(link.gb_per_s, 1, 'GB/s', grouped=False)} (link allows {theory} GB/s; {link.runs} runs)")
    for run in result.precision_runs:
        console.print(f"training in {run.precision} on {run.device}: validation accuracy "
                      f"{run.validation_accuracy:.1%}, {run.seconds:.1f} s, {run.steps} steps")
    if result.gpu_estimate is not None:
        console.print(_gpu_table(result.gpu_estimate))
    for line in _peak_lines(result.peaks):
        console.print(line, highlight=False)
    for line in result.unmeasured:
        console.print(f"[dim]not measured: {line}[/dim]")
    if result.machine_busy is not None and not result.machine_busy.busy:  # a busy one leads the summary
        console.print(busy_sentence(result.machine_busy))
    console.print("[bold]summary[/bold]")
    for sentence in result.summary:
        console.print(f"  {sentence}")


def run(args) -> int:
    from gpufeed.bench.run import parse_devices, parse_precisions, run_bench

    check_output_paths(args)
    devices = parse_devices(args.device)
    precisions = parse_precisions(args.precision)
    quiet = args.json == "-"
    status = error_console if quiet else console
    with status.status("benchmarking") as spinner:
        result = run_bench(devices, precisions, quick=args.quick,
                           progress=lambda message: spinner.update(f"benchmarking: {message}"))
    if not quiet:
        _show(result)
    if args.json is not None or args.html is not None:
        from gpufeed.bench.run import peaks_by_device
        from gpufeed.cli.output import to_jsonable

        document = to_jsonable(result)
        document["peaks"], document["peak_derivations"], document["peak_bounds"] = peaks_by_device(result.peaks)
        emit_document(document, "bench", args, machine=document["machine"])
    return 0
