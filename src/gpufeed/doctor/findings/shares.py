"""Shares that mean the same thing for every kind: the fraction of the watched step time a finding's cause accounts
for, so what its fix could recover at most. Shares are disjoint: each second of step time goes to at most one
finding, and the shares of the findings that claim time sum to at most 1.

The step is split into parts (fractions of the watched wall time, `step_parts`):

    step ─┬─ data_wait    getting the input: blocked in the training loader, or (no DataLoader) the loop
          │               building its own batches (StepRecord.input_s: data_wait_s + loop_input_s)
          ├─ copy         host-to-device copies
          ├─ sync         the host waiting on the device (.item(), synchronize)
          ├─ collective   waiting at the gradient all-reduce after backward (several ranks: the rank that waited
          │               most, over the median step: a straggler's cost is the others' wait)
          └─ model        the rest: the model's forward, backward and optimizer, and the Python around them
                ├─ busy   the device computing (on a GPU: its busy share; on the CPU all of model)
                └─ idle   a GPU idle inside the model's part (neither waits, copies nor syncs explain it)

Each kind declares the part its cause lives in (kind.py: `Kind.claims(finding)`, its `PART` unless it depends on
the evidence: launch_overhead and small_batch). A kind whose cause can be anywhere in the step (cpu_saturated,
periodic_stall) claims from `step` itself. `allocate` hands time out in order of the measured shares, the largest
first (ties: a kind that names another in its `YIELDS_TO` goes after it, then the registry's order): each
finding gets its measured share, capped by what is left of its part and of every part above it. A finding that
got less keeps its measured figure in `evidence.share_measured`.
Kinds whose time is not measured (memory_pressure: `CLAIMS_TIME = False`) keep share 0 and take nothing.

Per-step spread: for the kinds measured in every step (`PER_STEP`, a StepRecord field), `evidence.share_interval`
is a 95% interval of the share, the ratio estimator sum(x)/sum(wall) over the steps with its linearised variance
(Cochran, Sampling Techniques, 3rd ed., section 6.4); diagnose.py reads it to tell a near-tie from a win.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.registry import KINDS

if TYPE_CHECKING:
    from gpufeed.doctor.findings.report import Finding
    from gpufeed.doctor.observation import Observation

PARENT = {"data_wait": "step", "copy": "step", "sync": "step", "collective": "step", "model": "step",
          "busy": "model", "idle": "model"}
PARTS = ("step", *PARENT)
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile


def step_parts(seen: Observation) -> dict[str, float]:
    """Each part's share of the watched step time (the module docstring)."""
    totals = seen.totals
    data, copy, sync = (totals.share(seconds) for seconds in (totals.input_s, totals.copy_s, totals.sync_s))
    ranks = seen.ranks.per_rank
    collective = 0.0
    if seen.ranks.world_size > 1 and ranks:
        step_ms = statistics.median(r.step_ms for r in ranks)
        collective = min(1.0, max(r.exposed_ms for r in ranks) / step_ms) if step_ms > 0 else 0.0
    model = max(0.0, 1.0 - data - copy - sync - collective)
    busy = seen.busy() if seen.on_gpu else None
    computing = model if busy is None else min(model, busy)
    idle = model - computing if busy is not None else model  # unknown busy: either may be all of the model's part
    return {"step": 1.0, "data_wait": data, "copy": copy, "sync": sync, "collective": collective, "model": model,
            "busy": computing, "idle": idle}


def chain(part: str) -> list[str]:
    """`part` and every part above it, up to the step."""
    parts = [part]
    while parts[-1] in PARENT:
        parts.append(PARENT[parts[-1]])
    return parts


def allocate(findings: list[Finding], seen: Observation) -> tuple[list[Finding], dict[str, float]]:
    """The findings with disjoint shares (the module docstring), in their given order, and what is left of each
    part after them."""
    left = step_parts(seen)
    present = {finding.kind for finding in findings}

    def precedence(index: int) -> tuple:
        kind = findings[index].kind
        yields = any(other in present for other in KINDS[kind].YIELDS_TO)
        return -round(findings[index].share, 9), yields, KINDS.index(kind)
    order = sorted(range(len(findings)), key=precedence)
    allocated = list(findings)
    for index in order:
        finding = findings[index]
        kind = KINDS[finding.kind]
        part = kind.claims(finding)
        evidence = dict(finding.evidence)
        interval = share_interval(seen, kind.PER_STEP)
        if part is None:
            granted = 0.0
        else:
            above = chain(part)
            granted = max(0.0, min(finding.share, *(left[name] for name in above)))
            for name in above:
                left[name] -= granted
            for name in PARTS[1:]:  # no part may keep more than what is left of the parts above it
                left[name] = min(left[name], *(left[upper] for upper in chain(name)[1:]))
            if granted < finding.share - 1e-9:
                evidence["share_measured"] = finding.share
        if interval is not None:  # the part's interval, scaled to the share granted from it
            low, high, point = interval
            scale = granted / point if point > 0 else 1.0
            evidence["share_interval"] = [round(max(0.0, low * scale), 4), round(min(1.0, high * scale), 4)]
        allocated[index] = dataclasses.replace(finding, share=granted, evidence=evidence)
    return allocated, left


def share_interval(seen: Observation, field: str | None) -> tuple[float, float, float] | None:
    """(low, high, estimate): a 95% interval of sum(field) / sum(wall_s) over the watched steps (the ratio
    estimator) and the estimate itself; None without a per-step field or with fewer than 2 steps."""
    if field is None or len(seen.steps) < 2:
        return None
    walls = [r.wall_s for r in seen.steps]
    parts = [getattr(r, field) for r in seen.steps]
    total = sum(walls)
    if total <= 0:
        return None
    ratio = sum(parts) / total
    n = len(walls)
    residuals = sum((x - ratio * w) ** 2 for x, w in zip(parts, walls, strict=True)) / (n - 1)
    half = Z95 * math.sqrt(residuals / n) / (total / n)
    return max(0.0, ratio - half), min(1.0, ratio + half), ratio
