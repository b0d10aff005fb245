"""The page of `gpufeed plan` for a language model: a pure function of its saved JSON (plan/language/run.py's
`language_plan_json`): the request, the device memory of one step by part and what the peak holds, what fits on
each GPU, the check against a measured step (when --check ran), the notes, what was not measured."""

from __future__ import annotations

from gpufeed.report.html import Page, new_figure
from gpufeed.report.plan_check import check_section
from gpufeed.units import bytes_text, size_text

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
    fitting = [gpu for gpu in document["gpus"] if gpu["fits"]]
    page.paragraph(f"The step peaks at {bytes_text(memory['peak_bytes'])} in the {memory['peak_phase']}: "
                   + (f"it fits on {len(fitting)} of the {len(document['gpus'])} GPUs in the catalog, the smallest "
                      f"{fitting[0]['name']}." if fitting else "it fits on none of the catalog's GPUs."), "lead")
    page.heading("Request")
    page.table(["setting", "value"], [("model", f"{request['model']} ({document['model_type']}, from "
                                                f"{document['source']})"),
                                      ("parameters", _parameters(document, tune["method"])),
                                      ("method", tune["method"] + (", activation checkpointing"
                                                                   if tune["checkpointing"] else "")),
                                      ("batch", f"{request['batch_size']} sequences of {document['sequence_length']} "
                                                f"tokens, {request['grad_accumulation']} micro-batch(es) a step"),
                                      ("optimizer, precision", f"{request['optimizer']}, {request['precision']}")])
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
    page.heading("What fits on one GPU")
    page.table(["GPU", "memory", "fits", f"max batch at {document['sequence_length']} tokens",
                f"max tokens at batch {request['batch_size']}", "precision", "notes"],
               [(gpu["name"], bytes_text(gpu["memory_bytes"], "GiB", 0), "yes" if gpu["fits"] else "no",
                 f"{gpu['max_batch_size']:,}", f"{gpu['max_sequence_length']:,}", gpu["precision"], gpu["notes"])
                for gpu in document["gpus"]])
    if document.get("check"):
        check_section(page, document["check"])
    page.heading("Notes")
    page.bullets([*document.get("notes", []), *memory.get("notes", [])])
    page.heading("Not measured")
    page.bullets(document.get("unmeasured") or ["everything the plan needed was measured or computed"])
    return page
