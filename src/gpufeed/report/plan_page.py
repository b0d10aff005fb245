"""The page of `gpufeed plan` for an image model (a language model's is language_plan_page.py; the plan kind,
report/kinds/plan.py, chooses): a pure function of its saved JSON document (plan/run.py's `plan_json`, plus the
`check` block that --check adds).

Reading order: the recommendation, the request, the device memory of one step and which GPUs hold it, time and
cost per GPU in the document's ranking, the compute behind the times, the host to build, the check, what was not
measured. Documents from before the roofline planner (compute with `mfu`, no per-GPU `precision`, host without
`system`) render with what they hold.
"""

from __future__ import annotations

from gpufeed.report.html import Page, chart_text, new_figure, number, plain_log_ticks
from gpufeed.report.plan_check import check_section
from gpufeed.units import NA, bytes_as, bytes_text, fixed, percent, rate_text, size_text

MEMORY_PARTS = (("weights", "weights_bytes", "#1f77b4"), ("gradients", "gradients_bytes", "#ff7f0e"),
                ("optimizer state", "optimizer_bytes", "#9467bd"), ("activations", "activations_bytes", "#2ca02c"),
                ("overhead", "overhead_bytes", "#7f7f7f"))
FITS_COLOUR, MISSES_COLOUR = "#2ca02c", "#d62728"


def plan_page(document: dict) -> Page:
    request = document["request"]
    page = Page(f"gpufeed plan: {request['model']}, input {shape_text(request['input_shape'])}, "
                f"batch {request['batch_size']}, {request['precision']}", document["about"])
    page.paragraph(document["recommendation"], "lead")
    _request_table(page, request)
    _memory_section(page, document)
    _gpu_section(page, document)
    _compute_section(page, document)
    _host_section(page, document)
    if document.get("check"):
        check_section(page, document["check"])
    page.heading("Not measured")
    page.bullets(document.get("unmeasured") or ["everything the plan needed was measured or computed"])
    return page


def shape_text(shape: list[int]) -> str:
    return "x".join(str(size) for size in shape)


def _request_table(page: Page, request: dict) -> None:
    page.heading("Request")
    shown = {**request, "input_shape": shape_text(request["input_shape"])}
    defaults = {"target_hours": "not set", "bytes_per_sample": "the input's element count (uint8)",
                "host_gpu": "the top-ranked GPU that fits"}
    page.table(["setting", "value"], [(name.replace("_", " "), defaults.get(name, NA) if value is None else value)
                                      for name, value in shown.items()])


def _memory_section(page: Page, document: dict) -> None:
    memory = document["memory"]
    page.heading("Device memory of one training step")
    page.paragraph(f"Peak: {bytes_text(memory['peak_bytes'])} per GPU at batch {memory['batch_size']} "
                   f"({memory['precision']}, {memory['optimizer']}, {memory['parameters']:,} parameters); method: "
                   f"{memory['method']}.")
    figure, axes = new_figure(8.0, 1.9)
    left = 0
    for label, key, colour in MEMORY_PARTS:
        axes.barh([0], [memory[key] / 2**30], left=left / 2**30, color=colour, edgecolor="white",
                  label=f"{label} {size_text(memory[key])}")
        left += memory[key]
    axes.axvline(memory["peak_bytes"] / 2**30, color="black", linestyle="--", linewidth=1.2,
                 label=f"peak {bytes_text(memory['peak_bytes'])}")
    axes.set_yticks([0], [f"batch {memory['batch_size']}"])
    axes.set_xlabel("GiB (2^30 bytes) per GPU")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.55), ncol=3, fontsize=8, frameon=False)
    page.chart(figure, "Device memory of one training step in GiB, by part, each part at its largest; dashed: the "
                       "peak, the most bytes live at once (a peak in the backward holds only part of the gradients, "
                       "so the parts can add up to more than the peak).")
    page.bullets(memory.get("notes") or [])
    _fit_chart(page, document)


def _fit_chart(page: Page, document: dict) -> None:
    gpus, peak = document["gpus"], document["memory"]["peak_bytes"]
    figure, axes = new_figure(8.0, 1.0 + 0.26 * len(gpus))
    capacities = [gpu["memory_bytes"] / 2**30 for gpu in gpus]
    axes.barh(range(len(gpus)), capacities, color=[FITS_COLOUR if gpu["fits"] else MISSES_COLOUR for gpu in gpus],
              alpha=0.75)
    for index, gpu in enumerate(gpus):
        text = f"max batch {gpu['max_batch_size']:,}" if gpu["fits"] else f"does not fit (max batch " \
               f"{gpu['max_batch_size']:,})"
        axes.annotate(text, (max(capacities[index], peak / 2**30), index), textcoords="offset points",
                      xytext=(3, -3), fontsize=7)  # right of the need line, so that the line does not cross it
    axes.axvline(peak / 2**30, color="black", linestyle="--", linewidth=1.2)
    axes.annotate(f"need {bytes_text(peak)}", (peak / 2**30, -0.6), textcoords="offset points", xytext=(3, 0),
                  fontsize=8, va="bottom", annotation_clip=False)
    axes.set_yticks(range(len(gpus)), [chart_text(gpu["name"]) for gpu in gpus], fontsize=8)
    axes.set_ylim(len(gpus) - 0.5, -1.2)
    axes.set_xlim(0, max(capacities + [peak / 2**30]) * 1.3)
    axes.set_xlabel("GiB per card (2^30 bytes)")
    fitting = sum(gpu["fits"] for gpu in gpus)
    page.chart(figure, f"Memory of each catalog GPU in GiB (green: the step fits, red: it does not; {fitting} of "
                       f"{len(gpus)} fit) against the step's peak need (dashed), in the document's ranking; the "
                       f"label is the largest batch per card that fits.")


def _gpu_section(page: Page, document: dict) -> None:
    gpus, request = document["gpus"], document["request"]
    page.heading("Time and cost per GPU")
    cards = f"{request['gpus']} cards" if request["gpus"] > 1 else "one card"
    figure, grid = new_figure(8.5, 1.2 + 0.26 * len(gpus), columns=3)
    panels = grid[0]
    _dot_panel(panels[0], gpus, "hours", "hours", errors=True)
    _dot_panel(panels[1], gpus, "cost_rent_usd", "USD to rent")
    _dot_panel(panels[2], gpus, "cost_buy_usd", "USD to buy")
    panels[0].set_yticks(range(len(gpus)), [chart_text(gpu["name"]) for gpu in gpus], fontsize=8)
    for panel in panels[1:]:
        panel.set_yticks(range(len(gpus)), [""] * len(gpus))
    timed = ("hours at the planned model-FLOPs utilisation (bars: the utilisation band)" if "mfu" in
             document["compute"] else "hours from the roofline of the step (bars: the efficiency band)")
    page.chart(figure, f"For the whole run ({request['epochs']} epochs of {request['dataset_size']:,} samples) on "
                       f"{cards}, in the document's ranking: {timed}, on-demand rent in USD for those hours, and "
                       f"list price in USD to buy (of the GPUs as sold); "
                       f"each axis logarithmic where its values span more than a factor of 10 (hollow: the step "
                       f"does not fit; {NA}: not in the catalog).")
    page.table(["rank", "GPU", "memory", "fits", "max batch", "precision", "samples/s", "hours", "hours band",
                "rent USD/h", "rent USD per job", "buy USD (GPUs)", "price date", "energy kWh"],
               [_gpu_row(index, gpu) for index, gpu in enumerate(gpus, 1)],
               caption="Every catalog GPU as ranked; rent per GPU-hour for the cards of the run, buy as sold; "
                       "energy: the card's TDP for the whole run")
    page.bullets(gpu["notes"] if gpu["notes"].startswith(gpu["name"]) or f"{gpu['name']}:" in gpu["notes"]
                 else f"{gpu['name']}: {gpu['notes']}" for gpu in gpus if gpu.get("notes"))


def _dot_panel(axes, gpus: list[dict], key: str, label: str, errors: bool = False) -> None:
    """One dot per GPU; NA written where the document has no figure."""
    known = [gpu[key] for gpu in gpus if gpu[key]]
    for index, gpu in enumerate(gpus):
        colour = FITS_COLOUR if gpu["fits"] else MISSES_COLOUR
        if not gpu[key]:
            axes.text(0.02, index, NA, transform=axes.get_yaxis_transform(), fontsize=7, va="center",
                      color="#777777")
            continue
        spread = None
        if errors and gpu.get("hours_low") is not None and gpu.get("hours_high") is not None:
            spread = [[gpu[key] - gpu["hours_low"]], [gpu["hours_high"] - gpu[key]]]
            known += [gpu["hours_low"], gpu["hours_high"]]
        axes.errorbar([gpu[key]], [index], xerr=spread, fmt="o", markersize=5, color=colour, capsize=2,
                      markerfacecolor=colour if gpu["fits"] else "white", linewidth=1)
    if known and max(known) > 10 * min(known):
        axes.set_xscale("log")
        plain_log_ticks(axes.xaxis)
        axes.set_xlim(min(known) / 1.5, max(known) * 1.5)
        label += " (log scale)"
    elif known:
        axes.set_xlim(0, max(known) * 1.1)
    axes.set_ylim(len(gpus) - 0.5, -0.5)
    axes.grid(True, axis="x", which="both", alpha=0.3)
    axes.set_xlabel(label, fontsize=9)
    axes.tick_params(axis="x", which="both", labelsize=7)


def _gpu_row(rank: int, gpu: dict) -> list:
    def shown(key: str, spec: str) -> str:
        return NA if gpu[key] is None else format(gpu[key], spec)

    band = NA if gpu["hours_low"] is None else f"{gpu['hours_low']:.3g}-{gpu['hours_high']:.3g}"
    buy = shown("cost_buy_usd", ",.0f")
    if gpu.get("buy_gpus") and gpu["cost_buy_usd"] is not None:
        buy += f" ({gpu['buy_gpus']})"
    per_hour = fixed(gpu.get("rent_usd_per_hour"), 2)
    samples = rate_text(gpu.get("samples_per_s"))
    return [rank, gpu["name"], bytes_text(gpu["memory_bytes"], "GiB", 0), gpu["fits"], gpu["max_batch_size"],
            gpu.get("precision") or NA, samples, shown("hours", ".3g"), band, per_hour,
            shown("cost_rent_usd", ",.2f"), buy, shown("price_date", ""), shown("energy_kwh", ".3g")]


def scientific(value: float) -> str:
    """2725993512960 -> '2.73 × 10¹²'."""
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa} × 10{str(int(exponent)).translate(str.maketrans('-0123456789', '⁻⁰¹²³⁴⁵⁶⁷⁸⁹'))}"


def _compute_section(page: Page, document: dict) -> None:
    compute = document["compute"]
    page.heading("Compute")
    page.table(["quantity", "value"], [
        ("parameters", f"{document['params']:,}"),
        ("FLOPs per step (forward and backward, a multiply-add counted as 2)", scientific(compute["flops_per_step"])),
        ("FLOPs per sample", scientific(compute["flops_per_sample"])),
        ("steps per epoch", f"{compute['steps_per_epoch']:,}"),
        ("steps in the run", f"{compute['total_steps']:,}"),
        *_time_rows(compute)])


def _time_rows(compute: dict) -> list[tuple[str, str]]:
    """How the times were reached: the roofline's bytes and efficiencies, or an older document's MFU."""
    if "mfu" in compute:
        return [("model-FLOPs utilisation (band)", f"{percent(compute['mfu'])} ({percent(compute['mfu_low'])}-"
                                                   f"{percent(compute['mfu_high'])})"),
                ("where the utilisation comes from", compute["mfu_source"])]
    return [("bytes moved per step (operators' inputs and outputs)", size_text(compute["bytes_per_step"])),
            ("efficiency: compute, memory (band)", f"{percent(compute['compute_efficiency'])}, "
                                                   f"{percent(compute['memory_efficiency'])} (x"
                                                   f"{compute['efficiency_low']:.2f}-x"
                                                   f"{compute['efficiency_high']:.2f})"),
            ("where the efficiencies come from", compute["efficiency_source"]),
            ("how the step was traced", compute["method"])]


def _host_section(page: Page, document: dict) -> None:
    host = document["host"]
    page.heading("Host")
    if host.get("system"):
        page.paragraph(f"The machine to buy around {document['host_gpu']}: {host['system']}.")
    else:
        page.paragraph(f"What the machine around {document['request']['gpus']} x {document['host_gpu']} needs.")
    rows = [("RAM", f"{bytes_text(host['ram_bytes'])} (at least {bytes_text(host['ram_minimum_bytes'])})",
             host["ram_reason"])]
    if host.get("ram_cache_bytes"):
        rows.append(("RAM to keep the dataset cached (a choice)", bytes_text(host["ram_cache_bytes"]),
                     host["ram_cache_reason"]))
    if host.get("bytes_reason"):
        rows.append(("bytes per sample", f"{host['bytes_per_sample']:,}", host["bytes_reason"]))
    decode = {"cpu": ", decoding on the CPU", "gpu": ", decoding on the GPU"}.get(host.get("decode"), "")
    rows.append((f"CPU cores{decode if host.get('cpu_cores_other_decode') is not None else ''}", host["cpu_cores"],
                 host["cpu_reason"]))
    if host.get("cpu_cores_other_decode") is not None:
        other = "--decode gpu" if host.get("decode") == "cpu" else "--decode cpu"
        rows.append((f"CPU cores with {other}", host["cpu_cores_other_decode"], host["cpu_other_decode_reason"]))
    rows += [("disk", bytes_text(host["disk_bytes"]), host["disk_reason"]),
             ("disk reads", f"{number(bytes_as(host['disk_read_bytes_per_s'], 'MiB'))} MiB/s",
              "while the data is not in the page cache (see disk)"),
             ("power supply", f"{host['psu_watts']:,} W", host["psu_arithmetic"])]
    if host.get("reference_system"):
        rows.append(("reference system", "", host["reference_system"]))
    page.table(["need", "value", "how it was reached"], rows)
    page.bullets(host.get("link_notes") or [])
