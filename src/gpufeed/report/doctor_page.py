"""The page of `gpufeed doctor --html`: the verdict, the gap between loader and model (with the tokens and model FLOPs
utilisation of a language model's batches), where each watched step's time
went, the host's readings, the findings with their evidence and fixes, and the gains that were measured. A pure
function of the saved document; a document with no watched step (the script failed first) still makes a page. The
meaning of each kind is its registered kind's (gpufeed.doctor.findings, which loads no torch)."""

from __future__ import annotations

import math

import numpy
from matplotlib.ticker import FuncFormatter

from gpufeed.doctor.findings import KINDS
from gpufeed.doctor.findings.kinds.worker_memory import WorkerMemory, WorkerMemoryEvidence
from gpufeed.doctor.findings.report import (
    gain_headline,
    mfu_sentence,
    rates_sentence,
    tokens_sentence,
    verdict_headline,
)
from gpufeed.report.doctor_ranks import ranks_section
from gpufeed.report.html import PART_COLOURS, Page, chart_text, factor, new_figure, number, stacked_bars
from gpufeed.units import NA, bytes_text, not_available, percent

LABELS = {"data wait": "data wait (blocked on the next batch)", "host-to-device": "host-to-device copies (host time)",
          "compute": "compute (device time, CUDA events)", "stalls": "stalls (host waiting on the device)",
          "other host": "other host work (the rest of the step)"}
CPU_REST = "compute and other host work (not separated on the CPU)"
MAX_BARS = 200  # more watched steps than this are drawn in groups of consecutive steps (`--steps` has no limit)
MAX_POINTS = 500  # more host readings than this are drawn as the means of consecutive readings
MARKED_POINTS = 150  # up to this many points per line, each reading is marked with a dot
# host readings: (panel, key, label, divisor, colour); optional keys are drawn when the document has them
SERIES = (("percent", "cpu_percent", "CPU, all cores", 1, "#1f77b4"),
          ("percent", "gpu_utilization_percent", "GPU utilization (NVML)", 1, "#2ca02c"),
          ("percent", "sm_activity_percent", "SM activity", 1, "#17becf"),
          ("GiB", "gpu_memory_used_bytes", "GPU memory used", 2**30, "#2ca02c"),
          ("GiB", "ram_used_bytes", "host RAM used", 2**30, "#1f77b4"),
          ("GiB", "ram_total_bytes", "host RAM installed", 2**30, "#1f77b4"),
          ("MiB/s", "disk_read_bytes_per_s", "disk reads", 2**20, "#8c564b"))


def doctor_page(document: dict) -> Page:
    verdict = document["verdict"]
    page = Page(f"gpufeed doctor: {verdict['primary'] or 'no training step was watched'}", document["about"])
    _verdict(page, document)
    _rates(page, document)
    timeline = document.get("timeline") or {}
    if timeline.get("steps"):
        _step_timeline(page, timeline["steps"])
    if timeline.get("profile"):
        _profiled(page, timeline["profile"])
    if timeline.get("samples"):
        _host_samples(page, timeline["samples"])
    if timeline.get(WorkerMemory.NAME):  # what that kind added to the timeline (its timeline())
        _worker_memory(page, timeline[WorkerMemory.NAME], document["findings"])
    if document.get("ranks"):
        ranks_section(page, document["ranks"], timeline.get("ranks") or [])
    _findings(page, document["findings"], document["verdict"].get("primary"))
    _notes(page, document)
    return page


def _notes(page: Page, document: dict) -> None:
    """The notes about the run (the document's `notes`), then the rest of `unmeasured`: what was not measured.
    Documents written before notes were typed have no `notes`: all their lines are under "Not measured"."""
    about = document.get("notes") or []
    missing = [line for line in document.get("unmeasured") or [] if line not in about]
    if about:
        page.heading("About the run")
        page.bullets(about)
    if missing:
        page.heading("Not measured")
        page.bullets(missing)


def _profiled(page: Page, profile: list[dict]) -> None:
    """The steps run under torch.profiler after the watched ones: operators, kernels and where the time went."""
    page.heading("Profiled steps")
    page.paragraph(f"{len(profile)} steps after the watched ones ran under torch.profiler, which slows them: their "
                   f"counts are exact, their times only show the proportions.")
    rows = []
    for step in profile:
        wall = step["wall_s"] or 0.0
        rows.append((step["index"], f"{wall * 1e3:.2f}", step["operators"], _share(step, "outside_operators_s"),
                     _share(step, "loader_s"), step.get("kernels"), step.get("short_kernels"),
                     _share(step, "kernel_busy_s")))
    page.table(("step", "wall ms", "operators", "outside operators", "in the loader", "kernels", "kernels < 20 us",
                "device busy (kernel union)"), rows, caption=f"Each profiled step ({NA}: not measured on this device)")


def _share(step: dict, key: str) -> str | None:
    wall = step.get("wall_s") or 0.0
    return None if step.get(key) is None or wall <= 0 else f"{step[key] / wall:.0%}"


def _verdict(page: Page, document: dict) -> None:
    verdict, findings = document["verdict"], document["findings"]
    page.heading("Verdict")
    if verdict["primary"] is None:
        page.paragraph(f"No training step was watched on {verdict['device']}, so there is no verdict: see the "
                       "script's error and what could not be measured below.", css="lead")
    else:
        page.paragraph(f"{verdict_headline(document)}. {verdict['primary']} means: "
                       f"{KINDS.meaning(verdict['primary'], 'see the findings')}.", css="lead")
        first = next((finding for finding in findings if finding["kind"] == verdict["primary"]), None)
        if first is not None and first.get("fix"):
            page.paragraph(f"What to do first: {first['fix']}")
        busy = verdict["device_busy"]
        page.table(["measure", "value"], [
            ("primary finding", verdict["primary"]), ("its share of the step", percent(verdict.get("share"), 1)),
            ("steps watched", f"{verdict['steps']:,}"),
            ("device", verdict["device"]), ("data wait share", percent(verdict["data_wait"], 1)),
            ("device busy share", percent(busy, 1) if busy is not None
             else not_available("measured with CUDA events only"))])
    if document.get("script_error"):
        page.heading("The script's error", level=3)
        page.code(document["script_error"])


def _rates(page: Page, document: dict) -> None:
    tokens, mfu = tokens_sentence(document), mfu_sentence(document)
    if tokens:
        page.paragraph(f"Tokens: {tokens}.")
    if mfu:
        page.paragraph(f"{mfu}.")
    loader, model = document.get("loader_samples_per_s"), document.get("model_samples_per_s")
    if loader is None or model is None or loader <= 0 or model <= 0:
        if document["verdict"]["primary"] is not None:
            page.paragraph(rates_sentence(document))
        return
    page.heading("The gap: loader against model")
    page.paragraph(rates_sentence(document))
    figure, axes = new_figure(8.0, 1.8)
    for row, (value, label, colour) in enumerate(((loader, "loader supplies", PART_COLOURS["data wait"]),
                                                  (model, "model consumes (fed instantly)", PART_COLOURS["compute"]))):
        axes.barh(row, value, 0.6, color=colour, label=label)
        axes.annotate(f"{value:,.0f}", (value, row), xytext=(4, 0), textcoords="offset points", va="center")
    axes.set_yticks([0, 1], ["loader", "model"])
    axes.set_xlim(0, max(loader, model) * 1.15)
    axes.set_xlabel("samples per second")
    figure.legend(loc="outside lower center", ncols=2, frameon=False, fontsize="small")
    page.chart(figure, "Samples per second the input pipeline supplied while watched, against what the model "
                       "consumes when every batch is ready at once.")


def step_parts(steps: list[dict]) -> dict[str, list[float]]:
    """Seconds of each part of each step; "compute" only when some step measured it, "loop input" (the loop building
    its own batches) only when some step spent time on it, "other host" the rest of the wall time (never negative;
    device compute overlaps host work, so the parts can add up to more than the wall)."""
    parts = {"data wait": [step["data_wait_s"] for step in steps],
             "loop input": [step.get("loop_input_s") or 0.0 for step in steps],
             "host-to-device": [step["copy_s"] for step in steps],
             "compute": [step["compute_s"] or 0.0 for step in steps], "stalls": [step["sync_s"] for step in steps]}
    if all(step["compute_s"] is None for step in steps):
        del parts["compute"]
    if not any(parts["loop input"]):
        del parts["loop input"]
    parts["other host"] = [max(0.0, step["wall_s"] - sum(values[index] for values in parts.values()))
                           for index, step in enumerate(steps)]
    return parts


def groups(count: int, limit: int) -> list[range]:
    """Consecutive index ranges of equal length (the last may be shorter), at most `limit` of them."""
    size = max(1, math.ceil(count / limit))
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


def _mean(values: list[float], indices: range) -> float:
    return sum(values[index] for index in indices) / len(indices)


def step_bars(steps: list[dict], limit: int = MAX_BARS) -> list[dict]:
    """The watched steps as bars: first step index, steps covered, each part's mean milliseconds per step (from
    `step_parts`), the mean wall time and the slowest step (index and milliseconds); consecutive steps are merged
    in equal groups when there are more than `limit`."""
    parts = step_parts(steps)
    walls = [step["wall_s"] for step in steps]
    bars = []
    for group in groups(len(steps), limit):
        slowest = max(group, key=lambda index: walls[index])
        bars.append({"first_step": steps[group[0]]["index"], "steps": len(group),
                     "parts": {name: _mean(values, group) * 1000 for name, values in parts.items()},
                     "wall_ms": _mean(walls, group) * 1000, "slowest_step": steps[slowest]["index"],
                     "slowest_ms": walls[slowest] * 1000})
    return bars


def _step_timeline(page: Page, steps: list[dict]) -> None:
    bars = step_bars(steps)
    measured = "compute" in bars[0]["parts"]
    grouped = bars[0]["steps"] > 1
    shown = {name: [bar["parts"][name] for bar in bars] for name in bars[0]["parts"]
             if any(bar["parts"][name] for bar in bars)}
    left_out = [name for name in bars[0]["parts"] if name not in shown]
    labels = dict(LABELS) if measured else {**LABELS, "other host": CPU_REST}
    figure, axes = new_figure(8.0, 3.4)
    positions = [bar["first_step"] for bar in bars]
    if grouped:  # a bar per group over the steps it covers, its height the group's mean step
        tops = stacked_bars(axes, positions, shown, labels, widths=[bar["steps"] for bar in bars], align="edge")
        starts, ends = positions, [bar["first_step"] + bar["steps"] for bar in bars]
    else:
        tops = stacked_bars(axes, positions, shown, labels)
        starts, ends = [x - 0.4 for x in positions], [x + 0.4 for x in positions]
    walls = [bar["wall_ms"] for bar in bars]
    overlap = any(top > wall * 1.001 for top, wall in zip(tops, walls, strict=True))
    if overlap:
        axes.hlines(walls, starts, ends, colors="black", linewidth=1.2,
                    label="mean step wall time" if grouped else "step wall time")
    if grouped:  # a mean hides a periodic stall: mark the slowest step of each group
        axes.plot([bar["slowest_step"] for bar in bars], [bar["slowest_ms"] for bar in bars], linestyle="none",
                  marker="_", markersize=7, markeredgewidth=1.5, color="black", label="slowest step of the group")
    axes.set_xlabel("watched step")
    axes.set_ylabel("milliseconds per step" if grouped else "milliseconds")
    figure.legend(loc="outside lower center", ncols=3, frameon=False, fontsize="small")
    notes = [f"Each bar is the mean of {bars[0]['steps']} consecutive watched steps ({len(steps):,} steps in "
             f"{len(bars)} bars), drawn over the steps it covers; its height is the mean step time in milliseconds, "
             "by part, and the black dash above it the slowest step of the group." if grouped else
             "Each bar is one watched step; its height is the step's time in milliseconds, by part."]
    if measured:
        notes.append("Compute is device time (CUDA events) and can overlap host work"
                     + (f"; where the parts add up to more than the {'mean ' if grouped else ''}step, the black "
                        f"{'line' if grouped else 'tick'} marks its wall time." if overlap else "."))
    else:
        notes.append("Without a device-time measure (on the CPU) compute is inside the rest of the host's time.")
    if left_out:
        notes.append(f"Zero in every step, so not drawn: {', '.join(left_out)}.")
    page.heading("Step timeline")
    page.chart(figure, " ".join(notes))


def _host_samples(page: Page, samples: list[dict]) -> None:
    present = [series for series in SERIES if any(sample.get(series[1]) is not None for sample in samples)]
    panels = list(dict.fromkeys(series[0] for series in present))
    if not panels:
        return
    figure, grid = new_figure(8.0, 1.2 + 1.6 * len(panels), len(panels), 1)
    rows = dict(zip(panels, numpy.atleast_1d(grid).ravel(), strict=True))
    points = groups(len(samples), MAX_POINTS)
    times = [_mean([sample["time_s"] for sample in samples], group) for group in points]
    for panel, key, label, divisor, colour in present:
        values = [_mean_reading([samples[index].get(key) for index in group]) / divisor for group in points]
        total = key.endswith("total_bytes")  # a capacity: a dashed line without markers
        rows[panel].plot(times, values, color=colour, label=label, linewidth=1 if total else 1.5,
                         linestyle="--" if total else "-", marker="." if len(points) <= MARKED_POINTS and not total
                         else None)
    cores = [sample.get("cpu_per_core_percent") or [] for sample in samples]
    if "percent" in rows and all(cores):
        rows["percent"].fill_between(times, [_mean([min(each) for each in cores], group) for group in points],
                                     [_mean([max(each) for each in cores], group) for group in points],
                                     color=SERIES[0][4], alpha=0.15, label="idlest to busiest core")
    for panel, axes in rows.items():
        axes.set_ylabel(panel)
        axes.set_ylim(0, 105 if panel == "percent" else None)
        axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small", frameon=False)
    rows[panels[-1]].set_xlabel("seconds since the watch began")
    page.heading("Host readings")
    averaged = (f" With {len(samples):,} readings, each point is the mean of {len(points[0])} consecutive ones "
                f"({len(points)} points)." if len(points[0]) > 1 else "")
    page.chart(figure, "Readings taken about every 0.1 s while the script ran: utilization in percent (the band "
                       "spans the idlest to the busiest core)" + (", memory in GiB" if "GiB" in rows else "")
               + (", disk reads in MiB/s" if "MiB/s" in rows else "") + "." + averaged)


def _worker_memory(page: Page, memory: dict, findings: list[dict]) -> None:
    """Each DataLoader worker's private memory over the watched batches, and worker_memory's projection of one
    worker to the end of the epoch (dashed)."""
    readings = memory["readings"]
    figure, axes = new_figure(8.0, 3.0)
    batches = [reading["batches"] for reading in readings]
    for worker in range(len(readings[0]["worker_bytes"])):
        axes.plot(batches, [reading["worker_bytes"][worker] / 2**20 for reading in readings], marker=".",
                  linewidth=1.5, label=f"worker {worker + 1} (read)")
    if memory.get("projection"):
        axes.plot([point[0] for point in memory["projection"]], [point[1] / 2**20 for point in memory["projection"]],
                  linestyle="--", color=PART_COLOURS["data wait"], label="one worker, projected")
    axes.set_xlabel("training batches handed out")
    axes.set_ylabel("private memory, MiB")
    axes.set_ylim(0, None)
    axes.legend(loc="upper left", fontsize="small", frameon=False)
    found = next((finding for finding in findings if finding["kind"] == WorkerMemory.NAME), None)
    page.heading("DataLoader workers' memory")
    caption = (f"Each worker's private memory (USS) while watched, by the training batches handed out; dashed: "
               f"one worker projected to the end of the epoch ({memory.get('epoch_batches') or NA} batches).")
    if found is not None:
        evidence = WorkerMemoryEvidence.of(found["evidence"])
        worker, total = (bytes_text(value, "GiB", 2, grouped=False)
                         for value in (evidence.projected_worker_bytes, evidence.projected_total_bytes))
        caption += (f" Projected: {worker} a worker, {total} for the {memory['workers_on_node']} "
                    f"on the node; {evidence.projection}.")
    page.chart(figure, caption)


def _mean_reading(values: list[float | None]) -> float:
    """The mean of the readings taken (NaN, a gap in the line, when none was)."""
    taken = [value for value in values if value is not None]
    return sum(taken) / len(taken) if taken else math.nan


def _findings(page: Page, findings: list[dict], primary: str | None) -> None:
    """The findings' table, the verified gains, then a section a finding: what it means, its evidence, its fix and
    what --try measured. The verdict's finding's meaning and fix are in the verdict above: said once."""
    page.heading("Findings")
    if not findings:
        page.paragraph("No finding.")
        return
    page.table(["kind", "severity", "share of step time", "confidence", "verified gain of the fix",
                "bound if input were free"],
               [(finding["kind"], finding["severity"], percent(finding["share"]), finding["confidence"],
                 _measured(finding.get("gain")), factor((finding.get("gain") or {}).get("bound")))
                for finding in findings], classes=[f"sev-{finding['severity']}" for finding in findings])
    _gains(page, [finding for finding in findings if (finding.get("gain") or {}).get("measured") is not None])
    for finding in findings:
        first = finding["kind"] == primary
        page.heading(f"{finding['kind']} ({finding['severity']}, {finding['confidence']} confidence)", level=3)
        share = f"{percent(finding['share'])} of the step time"
        above = "what it means and what to do are" if finding.get("fix") else "what it means is"
        page.paragraph(f"The verdict: {share}; {above} above." if first else
                       KINDS.meaning(finding["kind"], "") + f"; {share}.")
        page.table(["evidence", "value"], [(key, number(value)) for key, value in finding["evidence"].items()])
        if finding.get("fix") and not first:
            page.paragraph(finding["fix"])
        if finding.get("snippet"):
            page.code(finding["snippet"])
        gain = finding.get("gain")
        if gain:
            page.paragraph(f"Tried: {gain_headline(gain)}. How: {gain['how'].rstrip('.')}.")


def _measured(gain: dict | None) -> str:
    """The table's cell: the fix's median with its range, or why there is none."""
    if not gain or gain.get("measured") is None:
        return "not measured"
    spread = gain.get("range")
    return factor(gain["measured"]) + (f" ({spread[0]:.2f}–{spread[1]:.2f})" if spread and spread[0] != spread[1]
                                       else "")


def _gains(page: Page, verified: list[dict]) -> None:
    if not verified:
        return
    values = [finding["gain"]["measured"] for finding in verified]
    figure, axes = new_figure(8.0, 0.9 + 0.45 * len(verified))
    rows = list(range(len(verified)))
    axes.barh(rows, [value - 1.0 for value in values], 0.6, left=1.0, color=PART_COLOURS["compute"],
              label="measured speed-up")
    for row, value in zip(rows, values, strict=True):
        axes.annotate(factor(value), (value, row), xytext=(4, 0), textcoords="offset points", va="center")
    axes.axvline(1.0, color="black", linestyle="--", linewidth=1, label="1× (no change)")
    wide = min(values) > 0 and max(values + [1.0]) / min(values + [1.0]) > 10  # a log axis needs positive values
    if wide:
        axes.set_xscale("log")
        axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.set_xlim(min(values + [1.0]) * (0.8 if wide else 0), max(values + [1.0]) * (2.0 if wide else 1.15))
    axes.set_yticks(rows, [chart_text(finding["kind"]) for finding in verified])
    axes.invert_yaxis()
    axes.set_xlabel("speed-up (samples/s with the change ÷ without)" + (", log scale" if wide else ""))
    axes.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize="small", frameon=False)
    page.chart(figure, "The gains of the recommended fixes, measured by re-running the script with one change "
                       "each (doctor --try): samples/s with the change over a fresh baseline run's, the median of "
                       "the pairs; the dashed line is no change. How each was measured, and the bound if input "
                       "were free, is under its finding.")
