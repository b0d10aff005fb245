"""An `Observation` in, a `Report` out: every registered kind's detection in the registry's order (registry.py,
filled by findings/__init__.py), their shares made disjoint (shares.py), the verdict, the HEALTHY kind's finding
(compute_bound), judged last over the others, when no waste reaches its level, the findings sorted (the verdict's
first, then by share) and each kind's annotation of them, the throughputs, what the kinds add to the timeline,
and the report's invariants checked (invariants.py). Every kind is read through its contract (kind.py); none is
named here.

The verdict is verdict.py's.

Throughputs in the report (None when the batch size is unknown):
- model_samples_per_s = samples / (sum(wall_s) - sum(data_wait_s)): what the model consumes fed instantly.
- loader_samples_per_s: only when the steps wait for input (data-wait share >= INPUT_SHARE_MEDIUM), the loader
  paces training: with no loader workers the loader runs inside the wait, so samples / sum(data_wait_s);
  otherwise samples / sum(wall_s), the rate it delivered (exact for background workers, a lower bound when the
  worker count is unknown). Otherwise None: a loader that keeps up shows only that it is at least as fast as the
  model.
"""

from __future__ import annotations

import dataclasses

from gpufeed.doctor.findings import invariants, shares
from gpufeed.doctor.findings.grading import INPUT_SHARE_MEDIUM
from gpufeed.doctor.findings.kind import Judged
from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Report, Verdict
from gpufeed.doctor.findings.verdict import candidates, choose
from gpufeed.doctor.notes import Notes
from gpufeed.doctor.observation import Observation


def throughputs(seen: Observation) -> tuple[float | None, float | None]:
    """(loader_samples_per_s, model_samples_per_s), by the formulas in the module docstring."""
    totals = seen.totals
    model = loader = None
    feeding_s = totals.wall_s - totals.data_wait_s
    if totals.samples and feeding_s > 0:
        model = totals.samples / feeding_s
    if totals.samples and totals.share(totals.data_wait_s) >= INPUT_SHARE_MEDIUM:
        loader = totals.samples / (totals.data_wait_s if seen.loader.workers == 0 else totals.wall_s)
    return loader, model


def _opening_notes(seen: Observation) -> Notes:
    """The observation's notes, and what the whole diagnosis lacks."""
    notes = Notes(seen.notes)
    if seen.device is None:
        notes.unmeasured("device: not given; taken as a GPU only if the steps carry CUDA-event timing")
    if seen.on_gpu and seen.busy() is None:
        notes.unmeasured("device busy: neither CUDA-event timing nor NVML utilization was read")
    if seen.batch_size is None:
        notes.unmeasured("batch size: not read, so samples per second and small_batch are not computed")
    return notes


def diagnose(seen: Observation) -> Report:
    """Findings for the watched steps, the verdict, and the notes. Raises ValueError with no steps (the caller
    reports "no training step seen": `empty_report`) or steps without wall time."""
    if not seen.steps:
        raise ValueError("no training step was recorded: the doctor needs at least one watched step")
    if seen.totals.wall_s <= 0:
        raise ValueError(f"the {len(seen.steps)} recorded steps have no wall time; shares cannot be computed")
    notes = _opening_notes(seen)
    healthy, first = KINDS.healthy, Judged()
    found = [found for kind in KINDS if kind is not healthy
             and (found := kind.detect(seen, notes, first)) is not None]
    findings, left = shares.allocate(found, seen)
    primary, tied = choose(candidates(findings, notes))
    if primary is None:
        primary = healthy.detect(seen, notes, Judged(tuple(findings), left))
        findings.append(primary)
    findings.sort(key=lambda f: (f is not primary, -f.share, KINDS.index(f.kind)))
    for kind in KINDS:
        findings = kind.annotate(findings)
    primary = findings[0]
    totals = seen.totals
    verdict = Verdict(primary.kind, seen.device_busy(), totals.share(totals.data_wait_s), totals.steps,
                      seen.device or "unknown", seen.ranks.world_size, primary.share, tied)
    loader, model = throughputs(seen)
    report = Report(verdict, findings, notes.items, loader, model, seen.script_error, _timeline(seen),
                    [dataclasses.asdict(summary) for summary in seen.ranks.per_rank], seen.loader.workers)
    return invariants.checked(report)


def empty_report(seen: Observation) -> Report:
    """The report of a run in which no step was watched: no verdict kind, no findings, the notes saying why."""
    verdict = Verdict(None, None, None, 0, seen.device or "unknown", seen.ranks.world_size)
    return Report(verdict, [], list(seen.notes), None, None, seen.script_error, _timeline(seen),
                  [dataclasses.asdict(summary) for summary in seen.ranks.per_rank])


def _timeline(seen: Observation) -> dict:
    drawn = {"steps": [dataclasses.asdict(record) for record in seen.steps],
             "samples": [dataclasses.asdict(sample) for sample in seen.samples],
             "profile": [dataclasses.asdict(step) for step in seen.profile.steps] if seen.profile else []}
    for kind in KINDS:  # what a kind adds, under its name (worker_memory: the workers' readings)
        added = kind.timeline(seen)
        if added is not None:
            drawn[kind.NAME] = added
    return drawn
