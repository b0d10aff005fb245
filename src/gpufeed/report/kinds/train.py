"""The train result (cli/train.py's --json, docs/design.md "train"): its body keys, what its page
(report/train_page.py) reads, and its old key names (test_accuracy, test_loss) read as today's."""

from __future__ import annotations

from gpufeed.report.kinds.kind import DocumentKind, renamed
from gpufeed.report.kinds.shapes import Anything, EmptyOr, ListOf, MapOf, Maybe, Number, Record

# one log interval: its parts are shares of its own seconds (the running sum of the intervals' wall times)
INTERVAL = Record({"seconds": Number, "step": Number, "data_wait_fraction": Number,
                   "device_busy_fraction": Maybe(Number), "cpu_percent?": Maybe(Number),
                   "gpu_utilization_percent?": Maybe(Number), "sm_activity_percent?": Maybe(Number),
                   "samples_per_s?": Maybe(Number), "loss?": Maybe(Number)})
BODY = Record({
    "model": Anything, "device": Anything, "config": MapOf(), "samples_per_s": Number,
    "validation_accuracy": Maybe(Number), "validation_loss": Anything, "data_wait_fraction": Maybe(Number),
    "device_busy_fraction": Maybe(Number), "peak_memory_bytes": Maybe(Number), "steps": Number,
    "steps_this_run": Number, "epochs": Anything, "verdict": Anything, "parameters": Number,
    "precision": Anything, "world_size": Anything, "batch_size": Anything, "effective_batch_size": Anything,
    "learning_rate": Anything, "seconds": Anything, "timeline?": EmptyOr(ListOf(INTERVAL)),
    "unmeasured?": EmptyOr(ListOf(Anything))})


def _page(document: dict):
    from gpufeed.report.train_page import train_page

    return train_page(document)


TRAIN = DocumentKind("train", ("model", "config", "samples_per_s"), BODY, _page, current_names=renamed)
