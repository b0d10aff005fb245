"""The page of `gpufeed train --html`: the result, where each log interval's time went, utilization, throughput and
loss over time, and the resolved configuration. A pure function of the saved document."""

from __future__ import annotations

import math

from gpufeed.report.html import PART_COLOURS, Page, new_figure, number, stacked_bars
from gpufeed.units import bytes_text, fixed, not_available, percent

MAX_BARS = 200  # more log intervals than this are drawn in groups of consecutive intervals
MAX_POINTS = 1000  # more log intervals than this are drawn over time as means of consecutive intervals
CPU_REST = "compute and other host work (not separated on the CPU)"
LABELS = {"data wait": "data wait (blocked on the next batch)", "compute": "compute (device busy, CUDA events)",
          "other host": "other host time (the rest of the interval)"}


def train_page(document: dict) -> Page:
    page = Page(f"gpufeed train: {document['model']} on {document['device']}", document["about"])
    _headline(page, document)
    timeline = document.get("timeline") or []
    if timeline:
        _step_timeline(page, document)
        _utilization(page, timeline)
        _progress(page, timeline)
    else:
        page.heading("Timeline")
        page.paragraph("No log interval was recorded in this run (it had no steps left to train), so there is no "
                       "timeline to draw.")
    page.heading("Configuration")
    page.table(["setting", "value"], configuration_rows(document), caption="the resolved configuration of the run")
    if document.get("unmeasured"):
        page.heading("Not measured")
        page.bullets(document["unmeasured"])
    return page


def _headline(page: Page, document: dict) -> None:
    page.heading("Result")
    page.paragraph(f"Validation accuracy {percent(document['validation_accuracy'], 1)} after "
                   f"{document['steps']:,} steps ({document['epochs']} epoch{'s' * (document['epochs'] != 1)}) at "
                   f"{fixed(document['samples_per_s'], 0, 'samples/s')}.", css="lead")
    page.paragraph(f"Verdict: {document['verdict']}.")
    cuda = str(document["device"]).startswith("cuda")
    busy = document["device_busy_fraction"]
    rows = [("validation accuracy", percent(document["validation_accuracy"], 1)),
            ("validation loss", number(document["validation_loss"])),
            ("throughput", fixed(document["samples_per_s"], 0, "samples/s")),
            ("data wait share", percent(document["data_wait_fraction"], 1)),
            ("device busy share",
             percent(busy, 1) if busy is not None else not_available("measured with CUDA events only")),
            ("GPU utilization (NVML, mean)", number(document.get("gpu_utilization_percent"))
             + ("" if document.get("gpu_utilization_percent") is None else " %")),
            ("peak device memory allocated" if cuda else "peak resident memory of the process",
             bytes_text(document["peak_memory_bytes"], "MiB", 0)),
            ("model", f"{document['model']}, {document['parameters']:,} parameters"),
            ("device", f"{document['device']}, {document['precision']}, world size {document['world_size']}"),
            ("batch", f"{document['batch_size']} per device, {document['effective_batch_size']} in all, "
                      f"peak learning rate {number(document['learning_rate'])}"),
            ("steps", f"{document['steps']:,} ({document['steps_this_run']:,} in this run), "
                      f"{number(document['seconds'])} s")]
    if document.get("resumed_from"):
        rows.append(("resumed from", document["resumed_from"]))
    if document.get("out"):
        rows.append(("files", document["out"]))
    page.table(["measure", "value"], rows)


def intervals(document: dict, limit: int = MAX_BARS) -> list[dict]:
    """The log intervals as bars: first step, steps, intervals, wall seconds and each part's seconds ("compute" is
    None when not measured); consecutive intervals are merged in equal groups when there are more than `limit`."""
    step = document["steps"] - document["steps_this_run"]
    elapsed = 0.0
    bars = []
    for log in document.get("timeline") or []:
        seconds = log["seconds"] - elapsed  # `seconds` is the running sum of the intervals' wall times
        wait = log["data_wait_fraction"] * seconds
        busy = None if log["device_busy_fraction"] is None else log["device_busy_fraction"] * seconds
        bars.append({"first_step": step, "steps": log["step"] - step, "intervals": 1, "seconds": seconds,
                     "data wait": wait, "compute": busy, "other host": max(0.0, seconds - wait - (busy or 0.0))})
        elapsed, step = log["seconds"], log["step"]
    group = max(1, math.ceil(len(bars) / limit))
    return [_merge(bars[start:start + group]) for start in range(0, len(bars), group)]


def _merge(bars: list[dict]) -> dict:
    merged = {"first_step": bars[0]["first_step"], "intervals": len(bars)}
    for key in ("steps", "seconds", "data wait", "other host"):
        merged[key] = sum(bar[key] for bar in bars)
    busy = [bar["compute"] for bar in bars]
    merged["compute"] = None if None in busy else sum(busy)
    return merged


def _step_timeline(page: Page, document: dict) -> None:
    bars = intervals(document)
    measured = any(bar["compute"] is not None for bar in bars)
    names = ("data wait", "compute", "other host") if measured else ("data wait", "other host")
    per_step = [1000.0 / max(1, bar["steps"]) for bar in bars]
    parts = {name: [(bar[name] or 0.0) * scale for bar, scale in zip(bars, per_step, strict=True)] for name in names}
    labels = dict(LABELS) if measured else {**LABELS, "other host": CPU_REST}
    figure, axes = new_figure(8.0, 3.4)
    starts = [bar["first_step"] for bar in bars]
    tops = stacked_bars(axes, starts, parts, labels, widths=[bar["steps"] for bar in bars], align="edge")
    walls = [bar["seconds"] * scale for bar, scale in zip(bars, per_step, strict=True)]
    overlap = any(top > wall * 1.001 for top, wall in zip(tops, walls, strict=True))
    if overlap:
        axes.hlines(walls, starts, [bar["first_step"] + bar["steps"] for bar in bars], colors="black",
                    linewidth=1.2, label="wall time of the interval, per step")
    axes.set_xlabel("training step")
    axes.set_ylabel("milliseconds per step")
    figure.legend(loc="outside lower center", ncols=3, frameon=False, fontsize="small")
    every = document["config"].get("log_every_steps", "several")
    what = (f"Each bar is {bars[0]['intervals']} consecutive log intervals of {every} steps"
            if bars[0]["intervals"] > 1 else f"Each bar is one log interval of {every} steps (fewer at an epoch's end)")
    compute = ("compute is the device's busy time measured with CUDA events, which can overlap host work"
               + ("; where the parts add up to more than the interval, the black line marks its wall time" if overlap
                  else "") if measured else
               "on the CPU there is no device-busy measure, so compute and the rest of the host's work are one part")
    page.heading("Step timeline")
    page.chart(figure, f"{what}, drawn over the training steps it covers. Height: the interval's wall time per step "
                       f"in milliseconds, split into the time blocked waiting for the next batch and the rest; "
                       f"{compute}.")


def group_size(timeline: list[dict], limit: int = MAX_POINTS) -> int:
    """How many consecutive log intervals make one point of the lines over time."""
    return max(1, math.ceil(len(timeline) / limit))


def plot_over_time(axes, timeline: list[dict], key: str, label: str, colour: str) -> bool:
    """One reading per log interval as a step line over the interval's seconds; False when never measured. Above
    MAX_POINTS intervals, each point is the time-weighted mean of a group of consecutive intervals."""
    values = [log.get(key) for log in timeline]
    if all(value is None for value in values):
        return False
    ends = [log["seconds"] for log in timeline]
    lengths = [end - start for start, end in zip([0.0, *ends[:-1]], ends, strict=True)]
    size = group_size(timeline)
    times, heights = [0.0], []
    for start in range(0, len(values), size):
        group = range(start, min(start + size, len(values)))
        taken = [(values[index], max(lengths[index], 0.0)) for index in group if values[index] is not None]
        weight = sum(length for _, length in taken)
        heights.append(math.nan if not taken else sum(value * length for value, length in taken) / weight
                       if weight > 0 else sum(value for value, _ in taken) / len(taken))
        times.append(ends[group[-1]])
    axes.plot(times, heights[:1] + heights, drawstyle="steps-pre", color=colour, label=label, linewidth=1.5)
    return True


def _grouped_note(timeline: list[dict]) -> str:
    size = group_size(timeline)
    return (f" With {len(timeline):,} log intervals, each level is the time-weighted mean of {size} consecutive "
            f"intervals." if size > 1 else "")


def _utilization(page: Page, timeline: list[dict]) -> None:
    page.heading("Utilization")
    figure, axes = new_figure(8.0, 2.8)
    drawn = [plot_over_time(axes, timeline, "cpu_percent", "CPU, all host cores (psutil)", "#1f77b4"),
             plot_over_time(axes, timeline, "gpu_utilization_percent", "GPU utilization (NVML)",
                            PART_COLOURS["compute"]),
             plot_over_time(axes, timeline, "sm_activity_percent", "SM activity (NVML GPM)", "#17becf")]
    if not any(drawn):
        page.paragraph("Neither CPU nor GPU utilization was sampled in this run.")
        return
    axes.set_ylim(0, 105)
    axes.set_xlabel("seconds since the start of training")
    axes.set_ylabel("percent")
    axes.legend(loc="best", fontsize="small")
    missing = "" if drawn[1] else " GPU utilization was not measured (no NVML reading for this device)."
    activity = (" SM activity is the share of the GPU's SMs that were busy (NVML GPM, Hopper or newer): a kernel too "
                "small to fill the GPU counts fully in GPU utilization but only partly here." if drawn[2] else "")
    page.chart(figure, "Mean utilization over each log interval, in percent: CPU is the share of all host cores "
                       f"busy; GPU is NVML's share of time a kernel was running.{activity}{missing}"
                       f"{_grouped_note(timeline)}")


def _progress(page: Page, timeline: list[dict]) -> None:
    page.heading("Throughput and loss")
    figure, grid = new_figure(8.0, 2.8, 1, 2)
    left, right = grid[0]
    plot_over_time(left, timeline, "samples_per_s", "training throughput", "#1f77b4")
    finite = plot_over_time(right, timeline, "loss", "training loss", "#d62728")
    if not finite:  # every interval's loss was NaN or infinite (the JSON writer makes them null)
        right.text(0.5, 0.5, "no finite loss in any interval", transform=right.transAxes, ha="center",
                   va="center", color="#777777")
        right.set_xlim(left.get_xlim())
        right.set_yticks([])
    left.set_ylim(bottom=0)
    for axes, unit in ((left, "samples per second"), (right, "loss (mean over the interval)")):
        axes.set_xlabel("seconds since the start of training")
        axes.set_ylabel(unit)
        if axes.get_legend_handles_labels()[0]:
            axes.legend(loc="best", fontsize="small")
    lost = sum(log.get("loss") is None for log in timeline)
    gaps = (f" The loss was not finite (NaN or infinite) in {lost:,} of the {len(timeline):,} intervals"
            + (": the line has gaps there." if finite else ".") if lost else "")
    page.chart(figure, "Left: samples per second over each log interval (summed over ranks). Right: the mean "
                       f"training loss over each log interval.{gaps}{_grouped_note(timeline)}")


def configuration_rows(document: dict) -> list[tuple[str, str]]:
    """The run's settings as used: the model's own shape option only (hidden for the MLP, width for the others),
    and where the validation samples came from when no --val file was given."""
    config = document["config"]
    rows = []
    for key, value in config.items():
        if key == "explicit" or (key == "hidden" and config.get("model") != "mlp") \
                or (key == "width" and config.get("model") == "mlp"):
            continue
        if key == "validation" and value is None and document.get("data_description"):
            value = document["data_description"]
        rows.append((key, _setting(value)))
    return rows


def _setting(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(item) for item in value) or "none"
    return value if isinstance(value, str) else number(value)
