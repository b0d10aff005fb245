"""The doctor result (cli/doctor.py's --json, docs/design.md "doctor"): its body keys and what its page
(report/doctor_page.py, doctor_ranks.py, and the verdict's, the rates' and the gains' sentences in
doctor/findings/report.py) reads. A result with no watched step (the script failed first) has a page too."""

from __future__ import annotations

from gpufeed.report.kinds.kind import DocumentKind
from gpufeed.report.kinds.shapes import (
    All,
    Anything,
    EmptyOr,
    Key,
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

NUMBERS = ListOf(Number)
GAIN = Record({"measured?": Maybe(Number), "range?": EmptyOr(ListOf(Number, length=2)), "pairs?": EmptyOr(Number),
               "bound?": Maybe(Number), "how": Text, "change?": Anything})
FINDING_FIELDS = {"kind": Key, "severity": Anything, "share": Maybe(Number), "confidence": Anything,
                  "evidence": MapOf(), "gain?": EmptyOr(GAIN)}
# worker_memory's evidence is drawn beside the workers' memory and its batch is in the verdict's line
WORKER_MEMORY = Record({**FINDING_FIELDS, "evidence": Record({
    "projected_worker_bytes": Number, "projected_total_bytes": Number, "projection": Anything,
    "runs_out_at_batch?": Maybe(Number)})})
FINDING = Switch("kind", {"worker_memory": WORKER_MEMORY}, Record(FINDING_FIELDS))
STEP = Record({"index": Number, "wall_s": Number, "data_wait_s": Number, "copy_s": Number,
               "compute_s": EmptyOr(Number), "sync_s": Number, "loop_input_s?": Maybe(Number)})
PROFILED = Record({"index": Anything, "wall_s": EmptyOr(Number), "operators": Anything,
                   "outside_operators_s?": Maybe(Number), "loader_s?": Maybe(Number),
                   "kernel_busy_s?": Maybe(Number)})
READINGS = ("cpu_percent", "gpu_utilization_percent", "sm_activity_percent", "gpu_memory_used_bytes",
            "ram_used_bytes", "ram_total_bytes", "disk_read_bytes_per_s")  # doctor_page.SERIES's keys
SAMPLE = Record({"time_s": Number, **{f"{key}?": Maybe(Number) for key in READINGS},
                 "cpu_per_core_percent?": EmptyOr(NUMBERS)})
READINGS_ALIGNED = Rule("readings each with as many workers as the first",
                        lambda readings: all(len(reading["worker_bytes"]) >= len(readings[0]["worker_bytes"])
                                             for reading in readings))
WORKERS = Record({"readings": All(ListOf(Record({"batches": Number, "worker_bytes": NUMBERS}), nonempty=True),
                                  READINGS_ALIGNED),
                  "projection?": EmptyOr(ListOf(ListOf(Number, length=2))), "workers_on_node": Anything})
RANK_STEP = Record({"start_s": Number, "wall_s": Number, "data_wait_s": Number, "exposed_s": Number})
RANK_TIMELINE = Record({"rank": Number, "steps": EmptyOr(ListOf(RANK_STEP))})
TIMELINE = Record({"steps?": EmptyOr(ListOf(STEP)), "profile?": EmptyOr(ListOf(PROFILED)),
                   "samples?": EmptyOr(ListOf(SAMPLE)), "worker_memory?": EmptyOr(WORKERS),
                   "ranks?": EmptyOr(ListOf(RANK_TIMELINE))})
RANK = Record({"rank": Anything, "steps": Anything, "step_ms": Anything, "data_wait_ms": Anything,
               "compute_ms": Anything, "collective_ms": Anything, "exposed_ms": Anything, "bytes_per_step": Number})
VERDICT = All(Record({"primary": Key, "device": Anything, "data_wait?": Maybe(Number),
                      "share?": Maybe(Number), "tied_with?": EmptyOr(ListOf(Text))}),
              When("primary", Record({"device_busy": Maybe(Number), "steps": Number}), not_null=True))
BODY = All(
    Record({"verdict": VERDICT, "findings": EmptyOr(ListOf(FINDING)), "loader_samples_per_s?": Maybe(Number),
            "model_samples_per_s?": Maybe(Number), "model_tokens_per_s?": Maybe(Number),
            "real_tokens_per_s?": Maybe(Number), "mfu?": Maybe(Number), "mfu_peak_flops_per_s?": Maybe(Number),
            "mfu_precision?": Maybe(Text), "flops_per_token?": Maybe(Number), "rule_flops_per_token?": Maybe(Number),
            "flops_rule?": Maybe(Text), "mfu_missing?": Maybe(Text), "timeline?": EmptyOr(TIMELINE),
            "ranks?": EmptyOr(ListOf(RANK)),
            "notes?": EmptyOr(ListOf(Anything)), "unmeasured?": EmptyOr(ListOf(Anything))}),
    # under a verdict, the findings are searched for it, and the rates' sentence says what share of the step the
    # loader took
    When("verdict.primary", All(Record({"findings": ListOf(FINDING)}), When(
        "model_samples_per_s", Record({"verdict": Record({"data_wait": Number})}))), not_null=True))


def _page(document: dict):
    from gpufeed.report.doctor_page import doctor_page

    return doctor_page(document)


DOCTOR = DocumentKind("doctor", ("verdict", "findings"), BODY, _page, has_verdict=True)
