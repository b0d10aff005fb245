"""The plan result (cli/plan.py's --json, docs/design.md "plan") in its two variants, told apart by the body's
`kind`: a language model's plan (`"kind": "language_model"`, plan/language/run.py) has its own keys and page
(report/language_plan_page.py); any other is an image model's (report/plan_page.py). Both share the body keys, and
the section --check adds (report/plan_check.py)."""

from __future__ import annotations

from gpufeed.report.kinds.kind import DocumentKind
from gpufeed.report.kinds.shapes import (
    All,
    Anything,
    Either,
    EmptyOr,
    Flag,
    IfKey,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Record,
    Rule,
    Switch,
    Text,
    When,
)

LANGUAGE_MODEL = "language_model"  # the body's `kind` of a language model's plan
NOTES = EmptyOr(ListOf(Anything))
CHECK = Record({"device": Anything, "method": Anything, "predicted_peak_bytes?": Maybe(Number),
                "measured_peak_bytes?": Maybe(Number), "error_fraction?": Maybe(Number), "lines?": NOTES})
FITS = Either(Flag, Number)  # counted: how many cards fit

MEMORY = Record({"peak_bytes": Number, "batch_size": Anything, "precision": Anything, "optimizer": Anything,
                 "parameters": Number, "method": Anything, "weights_bytes": Number, "gradients_bytes": Number,
                 "optimizer_bytes": Number, "activations_bytes": Number, "overhead_bytes": Number, "notes?": NOTES})

def _band_holds_hours(gpu: dict) -> bool:
    """Hours within their band (the chart's error bar), where the GPU has all three."""
    hours = [gpu.get(key) for key in ("hours_low", "hours", "hours_high")]
    return None in hours or not hours[1] or hours[0] <= hours[1] <= hours[2]


GPU = All(Record({"name": Anything, "memory_bytes": Number, "fits": FITS, "max_batch_size": Number,
                  "hours": Maybe(Number), "hours_low": Maybe(Number), "hours_high?": Maybe(Number),
                  "cost_rent_usd": Maybe(Number), "cost_buy_usd": Maybe(Number), "price_date": Anything,
                  "energy_kwh": Maybe(Number), "rent_usd_per_hour?": Maybe(Number),
                  "samples_per_s?": Maybe(Number), "notes?": EmptyOr(Text)}),
          When("hours_low", Record({"hours_high": Number}), not_null=True),
          When("notes", Record({"name": Text})),  # a note is told by whether it starts with the name
          Rule("hours_low <= hours <= hours_high", _band_holds_hours))
COUNTS = {"flops_per_step": Number, "flops_per_sample": Number, "steps_per_epoch": Number, "total_steps": Number}
# a plan saved before the roofline planner gives a model-FLOPs utilisation where a later one gives bytes and
# efficiencies
COMPUTE = IfKey("mfu", Record({**COUNTS, "mfu": Maybe(Number), "mfu_low": Maybe(Number),
                               "mfu_high": Maybe(Number), "mfu_source": Anything}),
                Record({**COUNTS, "bytes_per_step": Number, "compute_efficiency": Maybe(Number),
                        "memory_efficiency": Maybe(Number), "efficiency_low": Number, "efficiency_high": Number,
                        "efficiency_source": Anything, "method": Anything}))
HOST = All(Record({"ram_bytes": Maybe(Number), "ram_minimum_bytes": Maybe(Number), "ram_reason": Anything,
                   "ram_cache_bytes?": EmptyOr(Number), "cpu_cores": Anything, "cpu_reason": Anything,
                   "decode?": Maybe(Text), "disk_bytes": Maybe(Number), "disk_reason": Anything,
                   "disk_read_bytes_per_s": Number, "psu_watts": Number, "psu_arithmetic": Anything,
                   "link_notes?": NOTES}),
           When("ram_cache_bytes", Record({"ram_cache_reason": Anything})),
           When("bytes_reason", Record({"bytes_per_sample": Number})),
           When("cpu_cores_other_decode", Record({"cpu_other_decode_reason": Anything}), not_null=True))
IMAGE_PLAN = Record({
    "request": Record({"model": Anything, "input_shape": ListOf(Anything), "batch_size": Anything,
                       "precision": Anything, "gpus": Number, "epochs": Anything, "dataset_size": Number}),
    "recommendation": Anything, "memory": MEMORY, "gpus": ListOf(GPU), "compute": COMPUTE, "params": Number,
    "host": HOST, "host_gpu": Anything, "check?": EmptyOr(CHECK), "unmeasured?": NOTES})

LANGUAGE_MEMORY = Record({
    "peak_bytes": Number, "peak_phase": Anything, "peak_parts": MapOf(Maybe(Number)), "method": Anything,
    **{key: Number for key in ("trainable_weights_bytes", "frozen_weights_bytes", "gradients_bytes",
                               "optimizer_bytes", "activations_bytes", "optimizer_step_bytes", "overhead_bytes")},
    "notes?": ListOf(Anything)})
LANGUAGE_GPU = Record({"name": Anything, "memory_bytes": Number, "fits": Anything, "max_batch_size": Number,
                       "max_sequence_length": Number, "precision": Anything, "notes": Anything})
LANGUAGE_PLAN = Record({
    "request": Record({"model": Anything, "tune": Record({"method": Text, "checkpointing": Anything}),
                       "batch_size": Anything, "precision": Anything, "grad_accumulation": Anything,
                       "optimizer": Anything}),
    "sequence_length": Anything, "model_type": Anything, "source": Anything, "params": Number,
    "trainable_params": Number, "memory": LANGUAGE_MEMORY, "gpus": ListOf(LANGUAGE_GPU),
    "flops_per_token?": Maybe(Number), "check?": EmptyOr(CHECK), "notes?": ListOf(Anything), "unmeasured?": NOTES})
BODY = Switch("kind", {LANGUAGE_MODEL: LANGUAGE_PLAN}, IMAGE_PLAN)


def _page(document: dict):
    if document.get("kind") == LANGUAGE_MODEL:
        from gpufeed.report.language_plan_page import language_plan_page

        return language_plan_page(document)
    from gpufeed.report.plan_page import plan_page

    return plan_page(document)


PLAN = DocumentKind("plan", ("request", "memory", "gpus"), BODY, _page)
