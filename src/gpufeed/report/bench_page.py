"""The page of `gpufeed bench`: a pure function of its saved JSON document (bench/results.py names every key).

Reading order: the summary sentences, whether the machine was busy, with no GPU the planner's estimate of the CNN
step on the catalog's GPUs, matrix-product TFLOP/s against size (with where a GPU overtakes the CPU),
the share of each peak and how each peak was derived, the convolution, training-step speed-ups over the CPU in
fp32, the host-device link against its theoretical rate, the short trainings per precision, what was not measured.
"""

from __future__ import annotations

from gpufeed.report.html import Page, chart_text, factor, new_figure, number, plain_log_ticks
from gpufeed.units import NA, bytes_as, bytes_text, fixed, percent

# One colour per precision on every chart; one line style per device (the CPU dashed, GPUs solid).
PRECISION_COLOURS = {"fp64": "#1f77b4", "fp32": "#2ca02c", "tf32": "#17becf", "bf16": "#ff7f0e", "fp16": "#d62728"}
GPU_LINE_STYLES = ("-", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)))


def bench_page(document: dict) -> Page:
    devices = list(document["settings"]["devices"])
    page = Page(f"gpufeed bench: {', '.join(devices)}", document["about"])
    for sentence in document.get("summary") or []:
        page.paragraph(sentence, "lead")
    settings = document["settings"]
    page.paragraph(f"Devices: {', '.join(devices)}; precisions asked: {', '.join(settings['precisions'])}; "
                   f"{'quick' if settings.get('quick') else 'full'} sweep. Times are medians of the runs each "
                   f"table states; TFLOP/s = 10^12 floating-point operations per second, a multiply-add counted as 2.")
    _conditions(page, document.get("machine_busy"))
    _gpu_estimate_section(page, document.get("gpu_estimate"))
    kernels = document.get("kernels") or []
    _matmul_section(page, [k for k in kernels if k["op"] == "matmul"], document.get("peak_bounds"))
    _peak_section(page, document, [k for k in kernels if k["op"] == "matmul"])
    convolutions = [k for k in kernels if k["op"] == "conv2d"]
    if convolutions:
        page.heading("Convolution")
        _kernel_table(page, convolutions, "One 3x3 convolution layer (batch, in->out channels, image, kernel)",
                      document.get("peak_bounds"))
    _train_section(page, document.get("train_steps") or [])
    _link_section(page, document)
    _precision_section(page, document.get("precision_runs") or [])
    page.heading("Not measured")
    page.bullets(document.get("unmeasured") or ["everything asked for was measured"])
    return page


def _conditions(page: Page, busy: dict | None) -> None:
    """The busy-machine readings (documents before they were taken have none)."""
    if not busy:
        return
    steal = percent(busy.get("steal_share"), 1)
    spread = "none" if busy.get("worst_spread") is None else (
        f"{busy['worst_spread']:.1f}x ({busy.get('worst_spread_measurement')})")
    if busy.get("worst_spread_counted") != busy.get("worst_spread") and "worst_spread_counted" in busy:
        counted = busy["worst_spread_counted"]
        spread += (f"; of repeats over 1 ms apart, the limit's concern, "
                   f"{'none' if counted is None else f'{counted:.1f}x'}")
    verdict = "Figures unreliable: " + "; ".join(busy["reasons"]) + "." if busy.get("busy") else "Machine quiet."
    page.paragraph(f"{verdict} Over the bench's {busy['window_s']:.0f} s: other processes used "
                   f"{percent(busy['other_processes_cpu_share'], 0)} of {busy['usable_cores']} usable cores, steal "
                   f"{steal}, worst spread of repeats {spread}.")


def speedup(value: float) -> str:
    """A speed-up without an exponent: 24940.7 -> '24,941×', 42.25 -> '42.2×'."""
    return f"{value:,.0f}×" if value >= 100 else factor(value)


def _gpu_estimate_section(page: Page, answer: dict | None) -> None:
    if not answer:
        return
    page.heading("Would a GPU help?")
    rows = [(f"this CPU ({answer['cpu_precision']}, measured)", milliseconds(answer["cpu_step_s"]), "", "1", "")]
    rows += [(e["gpu"], milliseconds(e["step_s"]), f"{milliseconds(e['step_s_low'])}-{milliseconds(e['step_s_high'])}",
              speedup(e["speedup"]), f"{speedup(e['speedup_low'])}-{speedup(e['speedup_high'])}")
             for e in answer["estimates"]]
    step_bytes = bytes_text(answer["bytes_per_step"], "GB", 2, grouped=False)
    page.table(["device", "step ms", "band ms", "speed-up", "band"], rows,
               caption=f"The {answer['model']} training step at batch {answer['batch_size']}: measured on this CPU, "
                       f"estimated by gpufeed plan's roofline on the fastest catalog GPUs and the fastest consumer "
                       f"card ({answer['flops_per_step'] / 1e9:.1f} GFLOPs and {step_bytes} "
                       f"a step in {answer['gpu_precision']}; {answer['efficiency_source']}). A step under a "
                       f"millisecond also waits on kernel launches, which the roofline leaves out.")


def matrix_size(size: str) -> int:
    """'512 x 512 x 512' -> 512 (the sweep multiplies square matrices)."""
    return int(size.split("x")[0])


def milliseconds(seconds: float) -> str:
    """Seconds as milliseconds to 3 significant figures, without an exponent: 1.3947 -> '1,395'."""
    value = seconds * 1e3
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def share(fraction: float | None) -> str:
    """A fraction as a percentage, with a decimal under 10% so that small shares do not read 0%."""
    return percent(fraction, 1 if fraction is not None and abs(fraction) < 0.1 else 0)


def crossover_size(cpu: dict[int, float], gpu: dict[int, float]) -> int | None:
    """The smallest matrix size measured on both at which the GPU's TFLOP/s beat the CPU's (as the summary's
    sentence counts it), or None when the GPU is never faster at a size both measured."""
    return min((size for size in cpu.keys() & gpu.keys() if gpu[size] > cpu[size]), default=None)


def _series(kernels: list[dict], value) -> dict[tuple[str, str], dict[int, float]]:
    """{(device, precision): {size: value}} in increasing size, for rows where `value(row)` is not None."""
    found: dict[tuple[str, str], dict[int, float]] = {}
    for row in sorted(kernels, key=lambda row: matrix_size(row["size"])):
        if value(row) is not None:
            found.setdefault((row["device"], row["precision"]), {})[matrix_size(row["size"])] = value(row)
    return found


def _style(device: str, devices: list[str]):
    gpus = [name for name in devices if name != "cpu"]
    return "--" if device == "cpu" else GPU_LINE_STYLES[gpus.index(device) % len(GPU_LINE_STYLES)]


def _size_chart(series: dict, ylabel: str, log_y: bool):
    """Lines of one value against matrix size per device and precision (log2 x, ticks at the sizes)."""
    figure, axes = new_figure(8.0, 3.6)
    devices = sorted({device for device, _ in series}, key=lambda name: (name != "cpu", name))
    sizes = sorted({size for points in series.values() for size in points})
    order = list(PRECISION_COLOURS)
    for (device, precision), points in sorted(series.items(), key=lambda item: (
            devices.index(item[0][0]), order.index(item[0][1]) if item[0][1] in order else len(order))):
        axes.plot(list(points), list(points.values()), marker="o", markersize=4,
                  color=PRECISION_COLOURS.get(precision, "#555555"), linestyle=_style(device, devices),
                  label=chart_text(f"{device} {precision}"))
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.minorticks_off()
    if log_y:
        axes.set_yscale("log")
        plain_log_ticks(axes.yaxis)
    axes.set_xlabel("matrix size n (n x n times n x n)")
    axes.set_ylabel(ylabel)
    axes.grid(True, which="major", alpha=0.3)
    return figure, axes


def _matmul_section(page: Page, matmuls: list[dict], bounds: dict | None = None) -> None:
    page.heading("Matrix products")
    if not matmuls:
        page.paragraph("No matrix product was measured (see Not measured).")
        return
    series = _series(matmuls, lambda row: row["tflops"] if row["tflops"] > 0 else None)  # zero: no time measured
    if not series:
        page.paragraph("No matrix product has a positive TFLOP/s to draw on a log scale; the table lists them.")
        _kernel_table(page, matmuls, "Every matrix product measured (n³: n x n times n x n)", bounds)
        return
    figure, axes = _size_chart(series, "TFLOP/s (log scale)", log_y=True)
    marked = []
    for (device, precision), points in sorted(series.items()):
        cpu = series.get(("cpu", precision))
        size = None if device == "cpu" or cpu is None else crossover_size(cpu, points)
        if size is not None:
            value = points[size]
            axes.plot([size], [value], marker="*", markersize=15, color=PRECISION_COLOURS.get(precision, "#555555"),
                      markeredgecolor="black", linestyle="none")
            axes.annotate(chart_text(f"{precision}: n={size}"), (size, value), textcoords="offset points",
                          xytext=(8, -12 - 11 * len(marked)), fontsize=8)
            marked.append(f"{device} overtakes the CPU in {precision} at n = {size}")
    if marked:  # a neutral star for the legend: each star has its precision's colour
        axes.plot([], [], marker="*", markersize=12, color="white", markeredgecolor="black", linestyle="none",
                  label="GPU overtakes CPU")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    crossing = ("; ".join(marked) + " (star: the smallest size measured on both where the GPU is faster)."
                if marked else "")
    page.chart(figure, f"Matrix-product throughput in TFLOP/s (log scale) against matrix size n (log scale), per "
                       f"device (CPU dashed) and precision, median of each size's runs. {crossing}")
    _kernel_table(page, matmuls, "Every matrix product measured (n³: n x n times n x n)", bounds)


FRACTION_BOUND = {"at least": "≤", "at most": "≥"}  # a fraction of a peak that is at least X is at most Y%


def _kernel_table(page: Page, rows: list[dict], caption: str, bounds: dict | None = None) -> None:
    tf32 = any(row.get("tf32_matmul") is not None or row.get("tf32_cudnn") is not None for row in rows)
    headers = ["device", "precision", "size", "TFLOP/s", "of peak", "median ms", "min-max ms", "spread", "runs"]
    body = []
    for row in rows:
        size = f"{matrix_size(row['size'])}³" if row["op"] == "matmul" else row["size"]
        bound = FRACTION_BOUND.get((bounds or {}).get(row["device"], {}).get(row["precision"], ""), "")
        of_peak = share(row.get("fraction_of_peak"))
        cells = [row["device"], row["precision"], size, f"{row['tflops']:.3g}",
                 of_peak if row.get("fraction_of_peak") is None else bound + of_peak,
                 milliseconds(row["seconds_median"]),
                 f"{milliseconds(row['seconds_min'])}-{milliseconds(row['seconds_max'])}",
                 NA if row.get("spread") is None else f"{row['spread']:.1f}x", row["runs"]]
        if tf32:
            flags = (row.get("tf32_matmul"), row.get("tf32_cudnn"))
            cells.append(NA if flags == (None, None) else f"{number(flags[0])} / {number(flags[1])}")
        body.append(cells)
    page.table(headers + (["TF32 allowed (matmul / cuDNN)"] if tf32 else []), body, caption=caption)


def _peak_section(page: Page, document: dict, matmuls: list[dict]) -> None:
    page.heading("Share of the peak")
    series = _series(matmuls, lambda row: None if row.get("fraction_of_peak") is None
                     else 100 * row["fraction_of_peak"])
    if series:
        figure, axes = _size_chart(series, "% of the device's peak", log_y=False)
        axes.axhline(100, color="black", linewidth=1, linestyle=":", label="peak (100%)")
        axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
        page.chart(figure, "Matrix-product throughput as a percentage of the device's dense peak for that precision "
                           "(table below), against matrix size n (log scale). A CPU's peak assumes a clock; where a "
                           "figure beat the peak at the clock read, the peak is taken at the clock the figures prove "
                           "(at least that), so no share exceeds 100%.")
    else:
        page.paragraph("No peak is known for any device and precision measured, so no share of it is shown.")
    peaks, derivations = document.get("peaks") or {}, document.get("peak_derivations") or {}
    bounds = document.get("peak_bounds") or {}

    def shown(device: str, precision: str, value: float) -> str:
        bound = (bounds.get(device) or {}).get(precision) or ""
        return f"{bound} {value:.4g}".strip()

    rows = [(device, precision, "unknown" if value is None else shown(device, precision, value),
             (derivations.get(device) or {}).get(precision, ""))
            for device, by_precision in peaks.items() for precision, value in by_precision.items()]
    page.table(["device", "precision", "peak TFLOP/s", "how it was obtained"], rows,
               caption="Dense peaks: from the CPU's cores, clock and instruction set, or a GPU's row in "
                       "hardware/gpus.json")


def _train_section(page: Page, steps: list[dict]) -> None:
    page.heading("Training steps")
    if not steps:
        page.paragraph("No training step was timed (see Not measured).")
        return
    shown = sorted((s for s in steps if s.get("speedup_vs_cpu_fp32") is not None),
                   key=lambda s: (s["model"], s["batch_size"], s["device"] != "cpu", s["device"], s["precision"]))
    if shown:
        figure, axes = new_figure(8.0, 0.8 + 0.26 * len(shown))
        labels = [chart_text(f"{s['model']}, batch {s['batch_size']}, {s['device']} {s['precision']}") for s in shown]
        values = [s["speedup_vs_cpu_fp32"] for s in shown]
        axes.barh(range(len(shown)), values, color=[PRECISION_COLOURS.get(s["precision"], "#555") for s in shown])
        axes.set_yticks(range(len(shown)), labels, fontsize=8)
        axes.invert_yaxis()
        if max(values) / max(min(values), 1e-9) > 30:
            axes.set_xscale("log")
            plain_log_ticks(axes.xaxis)
        axes.axvline(1.0, color="black", linewidth=1, linestyle=":")
        for index, value in enumerate(values):
            axes.annotate(factor(value), (value, index), textcoords="offset points", xytext=(3, -3), fontsize=7)
        axes.set_xlim(right=max(values) * (3 if axes.get_xscale() == "log" else 1.15))
        axes.set_xlabel("speed-up over the CPU in fp32 (same model and batch; dotted line: 1.0)")
        page.chart(figure, "Training-step speed in samples/s divided by the CPU's fp32 figure for the same model "
                           "and batch, per device and precision (colour: precision); median of each step's runs.")
    body = [(s["model"], s["device"], s["precision"], s["batch_size"], f"{s['samples_per_s']:,.0f}",
             milliseconds(s["seconds_median"]), f"{milliseconds(s['seconds_min'])}-{milliseconds(s['seconds_max'])}",
             s["runs"], factor(s.get("speedup_vs_cpu_fp32")))
            for s in steps]
    page.table(["model", "device", "precision", "batch", "samples/s", "median ms", "min-max ms", "runs",
                "vs CPU fp32"], body, caption="Every training step timed (forward, backward, optimizer step)")


def _link_label(row: dict) -> str:
    direction = "host to device" if row["direction"] == "host_to_device" else "device to host"
    return f"{direction}, {'pinned' if row['pinned'] else 'pageable'}, {bytes_as(row['bytes'], 'MiB'):g} MiB"


def _link_section(page: Page, document: dict) -> None:
    page.heading("Host-device link")
    rows = document.get("link") or []
    if not rows:
        reasons = [line for line in document.get("unmeasured") or [] if line.startswith("host-device link")]
        page.paragraph("Not measured: " + ("; ".join(reasons) if reasons else
                                           "no GPU was benchmarked, so there is no link to measure") + ".")
        return
    figure, axes = new_figure(8.0, 1.0 + 0.3 * len(rows))
    axes.barh(range(len(rows)), [row["gb_per_s"] for row in rows],
              color=["#1f77b4" if row["pinned"] else "#aec7e8" for row in rows])
    axes.set_yticks(range(len(rows)), [_link_label(row) for row in rows], fontsize=8)
    axes.invert_yaxis()
    for index, row in enumerate(rows):
        axes.annotate(f"{row['gb_per_s']:.1f}", (row["gb_per_s"], index), textcoords="offset points",
                      xytext=(3, -3), fontsize=7)
    theoretical = sorted({row["theoretical_gb_per_s"] for row in rows if row["theoretical_gb_per_s"] is not None})
    for index, value in enumerate(theoretical):
        axes.axvline(value, color="black", linestyle="--", linewidth=1)
        axes.annotate(f"PCIe theoretical {fixed(value, 2, 'GB/s', grouped=False)}", (value, 1.0),
                      xycoords=("data", "axes fraction"),
                      textcoords="offset points", xytext=(0, 2 + 10 * index), ha="right", va="bottom", fontsize=8)
    axes.set_xlim(0, max([row["gb_per_s"] for row in rows] + theoretical) * 1.12)
    axes.set_xlabel("GB/s (10^9 bytes per second, one direction)")
    page.chart(figure, "Copy bandwidth between host and device in GB/s, median of each copy's runs, from pinned "
                       "(dark) and pageable (light) host memory; dashed: what the PCIe link NVML reports can carry.")
    page.table(["direction", "host memory", "bytes per copy", "GB/s", "runs", "theoretical GB/s", "of theoretical"],
               [(row["direction"].replace("_", " "), "pinned" if row["pinned"] else "pageable", row["bytes"],
                 f"{row['gb_per_s']:.2f}", row["runs"],
                 fixed(row["theoretical_gb_per_s"], 2, grouped=False),
                 percent(None if not row["theoretical_gb_per_s"] else row["gb_per_s"] / row["theoretical_gb_per_s"]))
                for row in rows])


def _precision_section(page: Page, runs: list[dict]) -> None:
    page.heading("Accuracy and time per precision")
    if not runs:
        page.paragraph("No short training was run (see Not measured).")
        return
    base = {run["device"]: run["seconds"] for run in runs if run["precision"] == "fp32"}
    page.table(["precision", "device", "validation accuracy", "validation loss", "seconds", "vs fp32 time", "steps"],
               [(run["precision"], run["device"], percent(run["validation_accuracy"], 1),
                 fixed(run["validation_loss"], 4, grouped=False),
                 fixed(run["seconds"], 2, grouped=False), factor(run["seconds"] / base[run["device"]]
                                                  if run["seconds"] and base.get(run["device"]) else None),
                 run["steps"]) for run in runs],
               caption="The same short `gpufeed train` run in each precision: the CNN on the built-in data, same "
                       "seed and steps")
