"""The doctor's findings: an Observation in, a Report out. Reads doctor/observation.py, doctor/notes.py and
frameworks/; never observe/ or trials/, and loads no torch (the report pages read it).

A finding kind is a declared contract (kind.py: `Kind`): one module per kind in kinds/, named after it, holding
one `Kind` subclass (its name, meaning, part of the step, level and its source, detection, experiments, ...)
and its fix. This module is the registry's one list: each kind's line below puts it in `KINDS` (registry.py) in
the vocabulary's order (docs/design.md, "The doctor's vocabulary"), which is also the order of detection and of
ties between equal shares. Adding a kind is its module in kinds/, its line here and its row in the vocabulary:
every other module reads the kinds from `KINDS` and names none.

Here:
- kinds/: one module per kind (its own map names them)
- kind.py: Kind, the contract each kind declares; Judged, what the healthy kind is judged over; Evidence
- experiments.py: the --try experiments a kind declares, as data (trials/ builds and runs them)
- registry.py: Registry and KINDS, the kinds by name in the vocabulary's order (filled here)
- report.py: Report, Verdict, Finding, Gain, SEVERITIES, gain_headline, verdict_headline, rates_sentence
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
    padding_waste,
    periodic_stall,
    precision,
    small_batch,
    straggler,
    sync_stall,
    worker_memory,
)
from gpufeed.doctor.findings.registry import KINDS

KINDS.register(  # the vocabulary, in its order: one line per kind
    input_bound.InputBound(),
    cpu_saturated.CpuSaturated(),
    host_to_device.HostToDevice(),
    launch_overhead.LaunchOverhead(),
    sync_stall.SyncStall(),
    small_batch.SmallBatch(),
    padding_waste.PaddingWaste(),
    precision.Precision(),
    memory_pressure.MemoryPressure(),
    worker_memory.WorkerMemory(),
    periodic_stall.PeriodicStall(),
    communication.Communication(),
    straggler.Straggler(),
    compute_bound.ComputeBound(),
)
