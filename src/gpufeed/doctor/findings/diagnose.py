"""An `Observation` in, a `Report` out: every registered kind's detection in the registry's order (registry.py,
filled by findings/__init__.py), their shares made disjoint (shares.py), the verdict, the HEALTHY kind's finding
(compute_bound), judged last over the others, when no waste reaches its level, the findings sorted (the verdict's
first, then by share) and each kind's annotation of them, the throughputs, what the kinds add to the timeline,
and the report's invariants checked (invariants.py). Every kind is read through its contract (kind.py); none is
named here.

The verdict is verdict.py's.

The step's input is its data wait or, in a loop that builds its own batches (no DataLoader), the loop's own input
work (StepRecord.input_s = data_wait_s + loop_input_s); the verdict's `data_wait` is its share.
Throughputs in the report (None when the batch size is unknown):
- model_samples_per_s = samples / (sum(wall_s) - sum(input_s)): what the model consumes fed instantly.
- loader_samples_per_s: only when the steps wait for input (input share >= INPUT_SHARE_MEDIUM), the input
  paces training: with no loader workers, or the loop building its batches itself, the input is made inside the
  step, so samples / sum(input_s); otherwise samples / sum(wall_s), the rate it delivered (exact for background
  workers, a lower bound when the worker count is unknown). Otherwise None: a loader that keeps up shows only that
  it is at least as fast as the model.
- model_tokens_per_s and real_tokens_per_s, for batches of token ids (observe/tokens.py): the watched steps'
  positions (padding included) and real tokens over the same sum(wall_s) - sum(input_s); None unless every
  watched step counted them.

Model FLOPs utilisation, for batches of token ids (language-model training; `utilisation`):
- mfu = flops_per_step × steps / sum(wall_s) / peak: the FLOPs torch's FlopCounterMode counted in the last warm-up
  step (observe/flops.py: matrix products, convolutions and attention, forward and backward), taken as every
  watched step's, per second of the watched steps' whole wall time (data wait included, as nanoGPT's and PaLM's
  MFU count the whole step; compute_bound's fraction_of_peak is per second fed), over the device's dense peak in
  the precision that did most of the counted FLOPs (`mfu_peak_flops_per_s`, `mfu_precision`: hardware/peak.py's,
  from the catalog for a GPU). On the CPU too: its peak is derived from its cores, clock and vector units
  (hardware/peak.py `cpu_peak`), and the figure is honest against that stated peak; where the peak is not known
  (a GPU not in the catalog, a CPU whose clock or flags cannot be read) mfu is None and `mfu_missing` says why,
  as it does when no token ids were counted in every watched step or no FLOPs were counted.
- flops_per_token = flops_per_step / the counted step's token positions (padding included), beside
  rule_flops_per_token, measure/transformer_flops.py's 6N + 12·L·h·s of the step's model at the counted step's
  sequence length (`flops_rule` "6N+12Lhs"), or its 6N part alone ("6N") when the model has no transformers config
  that gives L and h.
"""

from __future__ import annotations

import dataclasses

from gpufeed.doctor.findings import invariants, shares
from gpufeed.doctor.findings.grading import INPUT_SHARE_MEDIUM
from gpufeed.doctor.findings.kind import Judged
from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import NO_TOKEN_IDS, Report, Verdict
from gpufeed.doctor.findings.verdict import candidates, choose
from gpufeed.doctor.notes import Notes
from gpufeed.doctor.observation import Observation


def throughputs(seen: Observation) -> tuple[float | None, float | None]:
    """(loader_samples_per_s, model_samples_per_s), by the formulas in the module docstring."""
    totals = seen.totals
    model = loader = None
    feeding_s = totals.wall_s - totals.input_s
    if totals.samples and feeding_s > 0:
        model = totals.samples / feeding_s
    if totals.samples and totals.share(totals.input_s) >= INPUT_SHARE_MEDIUM:
        in_step = seen.loader.workers == 0 or totals.loop_built
        loader = totals.samples / (totals.input_s if in_step else totals.wall_s)
    return loader, model


def token_rates(seen: Observation) -> tuple[float | None, float | None]:
    """(model_tokens_per_s, real_tokens_per_s), by the formula in the module docstring."""
    feeding_s = seen.totals.wall_s - seen.totals.input_s
    if feeding_s <= 0:
        return None, None
    tokens = [record.tokens for record in seen.steps]
    real = [record.real_tokens for record in seen.steps]
    return (sum(tokens) / feeding_s if None not in tokens else None,
            sum(real) / feeding_s if None not in real else None)


def utilisation(seen: Observation) -> dict:
    """The report's mfu, mfu_peak_flops_per_s, mfu_precision, flops_per_token, rule_flops_per_token, flops_rule
    and mfu_missing (why mfu is None), by the formulas in the module docstring."""
    arithmetic, totals = seen.arithmetic, seen.totals
    tokens = [record.tokens for record in seen.steps]
    per_token = rule = None
    if arithmetic is not None:
        per_token, rule = arithmetic.flops_per_token, arithmetic.rule_flops_per_token
    found = {"mfu": None, "mfu_peak_flops_per_s": None, "mfu_precision": None, "flops_per_token": per_token,
             "rule_flops_per_token": rule and rule[0], "flops_rule": rule and rule[1], "mfu_missing": None}
    if all(count is None for count in tokens):
        found["mfu_missing"] = NO_TOKEN_IDS
    elif None in tokens:
        found["mfu_missing"] = "not every watched step's batches held token ids"
    elif arithmetic is None or not arithmetic.flops_per_step:
        found["mfu_missing"] = "no FLOPs counted (see not measured)"
    elif arithmetic.peak_flops_per_s is None:
        found["mfu_missing"] = f"the device's {arithmetic.precision} peak is unknown"
    else:
        peak = arithmetic.peak_flops_per_s
        found.update(mfu=arithmetic.flops_per_step * totals.steps / totals.wall_s / peak,
                     mfu_peak_flops_per_s=peak, mfu_precision=arithmetic.precision)
    return found


def _opening_notes(seen: Observation) -> Notes:
    """The observation's notes, and what the whole diagnosis lacks."""
    notes = Notes(seen.notes)
    if seen.device is None:
        notes.unmeasured("device: not given; taken as a GPU only if the steps carry CUDA-event timing")
    if seen.on_gpu and seen.busy() is None:
        notes.unmeasured("device busy: neither CUDA-event timing nor NVML utilization was read")
    if seen.batch_size is None:
        notes.unmeasured("batch size: not read, so samples per second and small_batch are not computed")
    counted = seen.arithmetic.tokens if seen.arithmetic is not None else None
    tokens = [record.tokens for record in seen.steps]
    if counted and None not in tokens and any(count != counted for count in tokens):
        notes.run(f"MFU: takes each watched step to do the counted warm-up step's FLOPs, and the watched steps "
                  f"held {sum(tokens) / len(tokens):,.0f} token positions on average against its {counted:,}")
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
    verdict = Verdict(primary.kind, seen.device_busy(), totals.share(totals.input_s), totals.steps,
                      seen.device or "unknown", seen.ranks.world_size, primary.share, tied)
    loader, model = throughputs(seen)
    report = Report(verdict, findings, notes.items, loader, model, seen.script_error, _timeline(seen),
                    [dataclasses.asdict(summary) for summary in seen.ranks.per_rank], seen.loader.workers,
                    *token_rates(seen), **utilisation(seen))
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
