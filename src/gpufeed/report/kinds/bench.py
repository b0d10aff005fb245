"""The bench result (cli/bench.py's --json, docs/design.md "bench"): its body keys, what its page
(report/bench_page.py) reads, and its precision runs' old key names (test_accuracy, test_loss) read as today's."""

from __future__ import annotations

from gpufeed.report.kinds.kind import DocumentKind, renamed
from gpufeed.report.kinds.shapes import (
    All,
    Anything,
    EmptyOr,
    Key,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Pattern,
    Record,
    Switch,
    Text,
    When,
)

TIMES = {"tflops": Number, "seconds_median": Number, "seconds_min": Number, "seconds_max": Number,
         "fraction_of_peak?": Maybe(Number), "spread?": Maybe(Number), "runs": Anything}
# a matrix product is drawn against its size n, read from "n x n x n"
MATRIX_PRODUCT = Record({"op": Text, "device": Text, "precision": Text, **TIMES,
                         "size": Pattern(r"\s*[+-]?\d+(_\d+)*\s*(x|$)", "a size such as '512 x 512 x 512'")})
CONVOLUTION = Record({"op": Text, "device": Key, "precision": Key, "size": Anything, **TIMES})
KERNEL = Switch("op", {"matmul": MATRIX_PRODUCT, "conv2d": CONVOLUTION}, Record({"op": Anything}))
STEP = Record({"model": Text, "device": Text, "precision": Text, "batch_size": Number, "samples_per_s": Number,
               "seconds_median": Number, "seconds_min": Number, "seconds_max": Number, "runs": Anything,
               "speedup_vs_cpu_fp32?": Maybe(Number)})
COPY = Record({"direction": Text, "pinned": Anything, "bytes": Number, "gb_per_s": Number, "runs": Anything,
               "theoretical_gb_per_s": Maybe(Number)})
PRECISION_RUN = Record({"precision": Anything, "device": Key, "seconds": Maybe(Number),
                        "validation_accuracy": Maybe(Number), "validation_loss": Maybe(Number), "steps": Anything})
ESTIMATE = Record({"gpu": Anything, "step_s": Number, "step_s_low": Number, "step_s_high": Number,
                   "speedup": Number, "speedup_low": Number, "speedup_high": Number})
GPU_ESTIMATE = Record({"model": Anything, "batch_size": Anything, "cpu_precision": Anything, "cpu_step_s": Number,
                       "gpu_precision": Anything, "flops_per_step": Number, "bytes_per_step": Number,
                       "efficiency_source": Anything, "estimates": ListOf(ESTIMATE)})
MACHINE_BUSY = All(Record({"window_s": Number, "other_processes_cpu_share": Maybe(Number), "usable_cores": Anything,
                           "steal_share?": Maybe(Number), "worst_spread?": Maybe(Number),
                           "worst_spread_counted?": Maybe(Number)}),
                   When("busy", Record({"reasons": ListOf(Text)})))
BODY = Record({
    "settings": Record({"devices": ListOf(Text), "precisions": ListOf(Text)}),
    "kernels": EmptyOr(ListOf(KERNEL)), "summary?": EmptyOr(ListOf(Anything)),
    "machine_busy?": EmptyOr(MACHINE_BUSY), "gpu_estimate?": EmptyOr(GPU_ESTIMATE),
    "peaks?": EmptyOr(MapOf(MapOf(Maybe(Number)))), "peak_bounds?": EmptyOr(MapOf(MapOf(Maybe(Text)))),
    "peak_derivations?": EmptyOr(MapOf(EmptyOr(MapOf()))), "train_steps?": EmptyOr(ListOf(STEP)),
    "link?": EmptyOr(ListOf(COPY)), "precision_runs?": EmptyOr(ListOf(PRECISION_RUN)),
    "unmeasured?": EmptyOr(ListOf(Text))})


def current_names(document: dict) -> dict:
    """Each precision run under today's key names (a copy when any is renamed)."""
    runs = document.get("precision_runs")
    if not isinstance(runs, list):
        return document
    return {**document, "precision_runs": [renamed(run) if isinstance(run, dict) else run for run in runs]}


def _page(document: dict):
    from gpufeed.report.bench_page import bench_page

    return bench_page(document)


BENCH = DocumentKind("bench", ("settings", "kernels"), BODY, _page, current_names=current_names)
