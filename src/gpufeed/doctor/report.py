"""The doctor's report, in the shape docs/design.md documents: a verdict, findings with evidence and fixes, and
what could not be measured. `to_json` gives exactly the documented JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

KINDS = ("input_bound", "cpu_saturated", "host_to_device", "launch_overhead", "sync_stall", "small_batch",
         "precision", "memory_pressure", "periodic_stall", "communication", "straggler", "compute_bound")
SEVERITIES = ("high", "medium", "low", "info")


@dataclass(frozen=True)
class Gain:
    measured: float  # the speed-up factor measured by an experiment (new samples/s ÷ old)
    how: str  # what was run, with the number of steps behind it


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    severity: str  # one of SEVERITIES
    share: float  # fraction of step time this finding accounts for
    evidence: dict  # the numbers behind it
    fix: str  # in words
    snippet: str  # as code
    gain: Gain | None
    confidence: str  # "high" | "medium" | "low"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class Verdict:
    primary: str  # one of KINDS
    device_busy: float | None  # fraction of wall time the device computed; None when not measurable
    data_wait: float  # fraction of wall time spent waiting for batches
    steps: int
    device: str


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    findings: list[Finding]
    unmeasured: list[str] = field(default_factory=list)
    loader_samples_per_s: float | None = None  # what the input pipeline can supply
    model_samples_per_s: float | None = None  # what the model consumes when fed instantly
    script_error: str | None = None  # the script's exception, one line, when it raised
    # what the report was made from, for the page's timeline (an addition to verdict, findings, unmeasured):
    # {"steps": [StepRecord fields...], "samples": [HostSample fields...], "profile": [one dict per profiled step]}
    timeline: dict = field(default_factory=lambda: {"steps": [], "samples": []})

    def to_json(self) -> dict:
        document = dataclasses.asdict(self)
        for finding in document["findings"]:
            finding["gain"] = finding["gain"] and {"measured": finding["gain"]["measured"],
                                                   "how": finding["gain"]["how"]}
        return document
