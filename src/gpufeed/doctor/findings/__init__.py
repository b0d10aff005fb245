"""The doctor's findings: an Observation in, a Report out. One module per kind, named after it, in kinds/
(docs/design.md, "The doctor's vocabulary"), and the modules they share here. Reads doctor/observation.py,
doctor/notes.py and frameworks/; never observe/ or trials/, and loads no torch (the report pages read it).

Each kind's module (kinds/<kind>.py) holds its judgement:
- `KIND`, its name, and `MEANING`, what it means in a line (the page's);
- `detect(seen, notes) -> Finding | None`: the detection from an `Observation`, adding to `notes` what it could
  not judge; compute_bound, the healthy verdict, is judged last over the others: `detect(seen, notes, others)`;
- `fix(...) -> (words, code)`: the remedy, from the numbers `detect` measured;
- `PART` (or `claims(finding)`, or `CLAIMS_TIME = False`): the part of the step its share is taken from, and
  `RECOMMEND_AT`: the share over which it may be the verdict, with its source (shares.py, verdict.py).
The experiments `--try` runs to test a kind's fix are trials/plan.py's (a function per kind that has one).

`FINDINGS` lists the kinds in the vocabulary's order, which is also the order of detection and of ties between
equal shares; `KINDS` (report.py) is their names, which a Finding's kind must be one of. A new kind is a new
module in kinds/, a line in `FINDINGS` and its name in report.py's `KINDS`.

Shared here:
- kinds/: one module per kind (its own map names them)
- report.py: Report, Verdict, Finding, Gain, SEVERITIES, KINDS, gain_headline, verdict_headline, rates_sentence
- grading.py: the shared thresholds, severity and confidence, the host-bound gate, new_finding
- stalls.py: slow-step outliers and the beat they fall on (periodic_stall's detection)
- shares.py: the step's parts and the disjoint shares; verdict.py: the verdict among them
- invariants.py: what every report must hold, checked on each
- diagnose.py: an Observation in, a Report out: the findings, their shares, the verdict, the throughputs
"""

from __future__ import annotations

from gpufeed.doctor.findings.kinds import (
    communication,
    compute_bound,
    cpu_saturated,
    host_to_device,
    input_bound,
    launch_overhead,
    memory_pressure,
    periodic_stall,
    precision,
    small_batch,
    straggler,
    sync_stall,
    worker_memory,
)
from gpufeed.doctor.findings.report import KINDS

FINDINGS = (input_bound, cpu_saturated, host_to_device, launch_overhead, sync_stall, small_batch, precision,
            memory_pressure, worker_memory, periodic_stall, communication, straggler, compute_bound)
assert tuple(module.KIND for module in FINDINGS) == KINDS, "FINDINGS and report.KINDS must list the same kinds"
BY_KIND = {module.KIND: module for module in FINDINGS}
MEANINGS = {module.KIND: module.MEANING for module in FINDINGS}
