"""The page of `gpufeed plan` for a language model: a pure function of its saved JSON (plan/language/run.py's
`language_plan_json`): the request, the device memory of one step by part and what the peak holds, the memory per
GPU when sharded, what fits on each GPU with its speed and cost, the recommendation, the host, the check against a
measured step (when --check ran), the notes, what was not measured. Older documents lack the sharding, time, cost
and host keys; their sections are left out."""

from __future__ import annotations

from gpufeed.report.html import Page, new_figure
from gpufeed.report.plan_check import check_section
from gpufeed.units import bytes_text, duration_text, money_text, rate_text, size_text

PEAK_PARTS = (("weights", "weights", "#1f77b4"), ("gradients", "gradients", "#ff7f0e"),
              ("optimizer state", "optimizer", "#9467bd"), ("activations", "activations", "#2ca02c"),
              ("optimizer step's temporaries", "optimizer step", "#8c564b"), ("overhead", "overhead", "#7f7f7f"))


def _parameters(document: dict, method: str) -> str:
    """As the terminal says it: all trained, or the frozen base and the LoRA adapters trained."""
    if method == "full":
        return f"{document['params']:,}, all trained"
    trained = document["trainable_params"]
    return f"{document['params'] - trained:,} frozen and {trained:,} of LoRA trained"


def language_plan_page(document: dict) -> Page:
    request, memory = document["request"], document["memory"]
    tune = request["tune"]
    page = Page(f"gpufeed plan: {request['model']}, {tune['method']}, {request['batch_size']} x "
                f"{document['sequence_length']} tokens, {request['precision']}", document["about"])
    fitting = sorted((gpu for gpu in document["gpus"] if gpu["fits"]), key=lambda gpu: gpu["memory_bytes"])
    sharded = document.get("sharded")
    peak = (f"The step peaks at {bytes_text(sharded['peak_bytes'])} a GPU, {sharded['strategy']} over "
            f"{sharded['gpus']} GPUs, at {sharded['peak_moment']}" if sharded else
            f"The step peaks at {bytes_text(memory['peak_bytes'])} in the {memory['peak_phase']}")
    page.paragraph(peak + ": " + (f"it fits on {len(fitting)} of the {len(document['gpus'])} GPUs in the catalog, "
                                  f"the smallest {fitting[0]['name']}." if fitting else
                                  "it fits on none of the catalog's GPUs."), "lead")
    page.heading("Request")
    page.table(["setting", "value"], [("model", f"{request['model']} ({document['model_type']}, from "
                                                f"{document['source']})"),
                                      ("parameters", _parameters(document, tune["method"])),
                                      ("method", tune["method"] + (", activation checkpointing"
                                                                   if tune["checkpointing"] else "")),
                                      ("batch", f"{request['batch_size']} sequences of {document['sequence_length']} "
                                                f"tokens, {request['grad_accumulation']} micro-batch(es) a step"),
                                      ("optimizer, precision", f"{request['optimizer']}, {request['precision']}"),
                                      *_sharding_rows(request, document)])
    page.heading("Device memory of one training step")
    parts = memory["peak_parts"]
    rows = [("weights, trained", memory["trainable_weights_bytes"], ""),
            ("weights, frozen (and buffers)", memory["frozen_weights_bytes"], ""),
            ("gradients", memory["gradients_bytes"], parts.get("gradients")),
            ("optimizer state", memory["optimizer_bytes"], parts.get("optimizer")),
            ("activations (at the forward's and backward's peak)", memory["activations_bytes"],
             parts.get("activations")),
            ("optimizer step's temporaries (at its peak)", memory["optimizer_step_bytes"], parts.get("optimizer step")),
            ("overhead", memory["overhead_bytes"], parts.get("overhead")),
            ("peak", memory["peak_bytes"], memory["peak_bytes"])]
    page.table(["part", "size", "in the peak"],
               [(name, size_text(size), "" if in_peak in ("", None) else size_text(in_peak))
                for name, size, in_peak in rows],
               caption=f"Each part at its largest; the last column is what the peak (in the {memory['peak_phase']}) "
                       f"holds, summing to it. Method: {memory['method']}.")
    figure, axes = new_figure(8.0, 1.6)
    left = 0
    for label, key, colour in PEAK_PARTS:
        if parts.get(key):
            axes.barh([0], [parts[key] / 2**30], left=left / 2**30, color=colour, edgecolor="white",
                      label=f"{label} {size_text(parts[key])}")
            left += parts[key]
    axes.set_yticks([0], ["peak"])
    axes.set_xlabel("GiB (2^30 bytes)")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=3, fontsize=8, frameon=False)
    page.chart(figure, f"What the peak holds, {bytes_text(memory['peak_bytes'])} in all.")
    if document.get("flops_per_token") is not None:
        rule = "6N + 12·L·h·s" if tune["method"] == "full" else "4N + 2N_trained + 12·L·h·s: no weight gradients " \
                                                                "for the frozen base"
        page.paragraph(f"Training FLOPs per token ({rule}): {document['flops_per_token']:,}.")
    if memory.get("step_flops"):
        tokens = memory["batch_size"] * document["sequence_length"]
        page.paragraph(f"The step as traced: {memory['step_flops'] / tokens:,.0f} FLOPs a token (attention by torch's "
                       f"formulas{', the recomputed forward' if tune['checkpointing'] else ''}); the times use it.")
    if sharded:
        _sharded_section(page, sharded)
    _gpus_section(page, document)
    if document.get("recommendation"):
        page.paragraph(f"Recommendation: {document['recommendation']}")
    if document.get("host"):
        _host_section(page, document["host"])
    if document.get("check"):
        check_section(page, document["check"])
    page.heading("Notes")
    page.bullets([*document.get("notes", []), *memory.get("notes", [])])
    page.heading("Not measured")
    page.bullets(document.get("unmeasured") or ["everything the plan needed was measured or computed"])
    return page


def _sharding_rows(request: dict, document: dict) -> list[tuple[str, str]]:
    sharding = request.get("sharding")
    if not sharding:
        return []
    rows = []
    if sharding.get("strategy"):
        rows.append(("sharding", f"{sharding['strategy']} over {sharding['gpus']} GPUs, "
                                 f"{sharding.get('gpus_per_node') or min(sharding['gpus'], 8)} a node, offload "
                                 f"{sharding['offload']}"))
    if document.get("tokens"):
        rows.append(("the job", f"{document['tokens']:,} tokens"))
    return rows


def _sharded_section(page: Page, sharded: dict) -> None:
    page.heading("Memory per GPU, sharded")
    parts = (("weights", "weights"), ("gradients", "gradients"), ("optimizer state", "optimizer"),
             ("gathered (unsharded units)", "gathered"), ("communication buffers", "buffers"),
             ("activations", "activations"), ("optimizer step's temporaries", "step_temporaries"),
             ("overhead", "overhead"))
    live = sharded.get("peak_parts") or {}  # each part's bytes at the peak; absent: not live (or a plan before them)
    rows = [(name, size_text(sharded.get(f"{key}_bytes")), size_text(live[key]) if key in live else "")
            for name, key in parts]
    rows += [("peak", size_text(sharded["peak_bytes"]), size_text(sharded["peak_bytes"])),
             ("offloaded to host RAM", size_text(sharded["host_bytes"]), "")]
    rows += [("sent per step", size_text(sharded["communication_bytes"]), ""),
             ("of it between nodes", size_text(sharded["network_bytes"]), "")]
    page.table(["part", "bytes a GPU", "in the peak"], rows,
               caption=f"{sharded['strategy']} over {sharded['gpus']} GPUs, the state divided by {sharded['degree']}; "
                       f"peak at {sharded['peak_moment']}. Layout: {sharded['layout']}.")


def _gpus_section(page: Page, document: dict) -> None:
    gpus = document["request"].get("sharding", {}).get("gpus", 1)
    page.heading("What fits, how fast, what it costs" + (f": {gpus} of each GPU" if gpus > 1 else ": one GPU"))

    def money(value) -> str:
        return "NA" if value is None else money_text(value)

    rows = []
    for gpu in document["gpus"]:
        time = gpu.get("time")
        hours = "NA" if gpu.get("hours") is None else \
            f"{duration_text(gpu['hours'])} ({duration_text(gpu['hours_low'])}-{duration_text(gpu['hours_high'])})"
        rows.append((gpu["name"], bytes_text(gpu["memory_bytes"], "GiB", 0), "yes" if gpu["fits"] else "no",
                     f"{gpu['max_batch_size']:,}", f"{gpu['max_sequence_length']:,}", gpu["precision"],
                     "NA" if not time else rate_text(time["tokens_per_s_per_gpu"]), hours,
                     money(gpu.get("cost_rent_usd")), money(gpu.get("cost_buy_usd")), gpu["notes"]))
    page.table(["GPU", "memory", "fits", f"max batch at {document['sequence_length']} tokens",
                f"max tokens at batch {document['request']['batch_size']}", "precision", "tokens/s a GPU",
                f"hours for {document.get('tokens', 0):,} tokens", "rent, the job", "buy, as sold", "notes"], rows)


def _host_section(page: Page, host: dict) -> None:
    page.heading(f"Host: {host['gpus']} x {host['gpu']} a node")
    loading = "; ".join(f"{way}: {bytes_text(size, 'GiB', 1)}" for way, size in host["loading"].items())
    page.table(["", "size", "how"],
               [("RAM", f"{bytes_text(host['ram_bytes'], 'GiB', 0)} (at least "
                        f"{bytes_text(host['ram_minimum_bytes'], 'GiB', 0)})", host["ram_reason"]),
                ("loading the checkpoint", host["loading_assumed"], loading),
                ("disk", bytes_text(host["disk_bytes"], "GiB", 0), host["disk_reason"]),
                ("CPU cores", str(host["cpu_cores"]), host["cpu_reason"]),
                ("power supply", f"{host['psu_watts']:,} W", host["psu_arithmetic"])],
               caption=f"{host['system']}; {host['nodes']} node(s).")
