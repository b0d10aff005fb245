"""The doctor's findings: one module per kind, named after it (docs/design.md, "The doctor's vocabulary").

Each module holds everything about its kind:
- `KIND`, its name, and `MEANING`, what it means in a line (the page's);
- `detect(seen, notes) -> Finding | None`: the detection from an `Observation`, adding to `notes` what it could
  not judge; compute_bound, the healthy verdict, is judged last over the others: `detect(seen, notes, others)`;
- `fix(...) -> (words, code)`: the remedy, from the numbers `detect` measured;
- `experiments(finding, cuda) -> (experiments, reason)`: the changes `--try` makes to test the fix
  (experiments.py's mechanisms), and why none or no more are tried.

`FINDINGS` lists them in the vocabulary's order, which is also the order of detection and of ties for the primary
kind; `KINDS` is their names. A new kind is a new module here and a line in `FINDINGS`.
"""

from __future__ import annotations

from gpufeed.doctor.findings import (
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
)

FINDINGS = (input_bound, cpu_saturated, host_to_device, launch_overhead, sync_stall, small_batch, precision,
            memory_pressure, periodic_stall, communication, straggler, compute_bound)
KINDS = tuple(module.KIND for module in FINDINGS)
BY_KIND = {module.KIND: module for module in FINDINGS}
MEANINGS = {module.KIND: module.MEANING for module in FINDINGS}
