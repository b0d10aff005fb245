"""small_batch: the device is underfilled; raise the batch or fuse.

Judged on the batch the model sees (`Observation.model_batch`: with gradient accumulation one loader batch):
- on any device, when the batch probe ran (observe/probe.py: a forward and backward at 1x, 2x and 4x the batch,
  after the watch): the model's time per batch less the batch times the probe's per-sample cost is fixed cost, a
  larger batch's to spread; the share is that fraction of the model's part of the step (`probed`), graded as
  shares are (grading.severity);
- on a GPU without a probe, two ways: the device is busy but its kernels occupy few SMs (GPM SM activity below
  LOW_SM_ACTIVITY_PERCENT while the device runs kernels at least LOW_DEVICE_BUSY of the time; utilization.gpu
  reads 100% whenever any kernel runs, GPM's SM activity the share of SMs that had work; the share is the step
  time in kernels that left the rest of the SMs idle), or a batch under SMALL_BATCH on a device busy less than
  LOW_DEVICE_BUSY (the share is the idle share waits, copies and syncs leave; medium when the host-bound gate
  holds, else low);
- on the CPU without a probe, a batch under SMALL_BATCH whose model time per batch is under SHORT_CPU_STEP_S: a
  heuristic, low, claiming no share (throughput at other batch sizes is not measured). A step whose measured
  arithmetic is tiny for its time (its FLOPs against the device's peak, per operator) is launch_overhead's first
  way, which also names the batch as the lever; this one reads the batch size alone.
--try: the DataLoader's batch_size doubled (a measurement, not a drop-in fix: it changes the optimisation).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import Declared, LoaderChange
from gpufeed.doctor.findings.grading import (
    LOW_DEVICE_BUSY,
    OWN_LEVEL,
    OWN_LEVEL_SOURCE,
    confidence,
    host_bound_gate,
    new_finding,
    severity,
    unexplained_idle,
)
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes
from gpufeed.doctor.observation import SMALL_BATCH

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: on the CPU without the batch probe, a step under 10 ms is short enough that fixed per-step costs
# (Python, per-operator dispatch of some microseconds) weigh on it. SMALL_BATCH is observation.py's.
SHORT_CPU_STEP_S = 0.010
# NVIDIA DCGM user guide, profiling metrics, SM Activity (DCGM_FI_PROF_SM_ACTIVE, what NVML's GPM SM_UTIL reads):
# "A value of 0.8 or greater is necessary, but not sufficient, for effective use of the GPU. A value less than
# 0.5 likely indicates ineffective GPU usage." utilization.gpu reads 100% whenever any kernel runs.
LOW_SM_ACTIVITY_PERCENT = 50.0


def underfilled(seen: Observation) -> Finding | None:
    """The device runs kernels most of the time, but they occupy few of its SMs (GPM SM activity below 50%)."""
    activity = seen.gpu_activity()
    sm = activity["sm_activity_percent"]
    busy = seen.busy()
    if sm is None or busy is None or busy < LOW_DEVICE_BUSY or sm >= LOW_SM_ACTIVITY_PERCENT:
        return None
    share = busy * (1.0 - sm / 100.0)  # step time in kernels that left the rest of the SMs idle: an upper bound
    batch, batches = seen.model_batch()
    evidence = {"device_busy": busy, **activity, "batch_size": batch, "sm_idle_share_of_busy": 1 - sm / 100}
    supporting = sum(1 for sample in seen.samples
                     if sample.sm_activity_percent is not None and sample.sm_activity_percent < LOW_SM_ACTIVITY_PERCENT)
    return new_finding(SmallBatch.NAME, severity(share), share, evidence, fix(batch, sm, batches),
                       confidence(supporting))


def probed(seen: Observation, batches: int) -> Finding | None:
    """The step's fixed cost from the batch probe (observe/probe.py): the model's time per forward (the step
    less its data wait, copies, syncs and, with several ranks, its wait at the all-reduce) less the batch times the
    probe's per-sample cost, and less, with several ranks, what its forward and backward took beyond the probe's
    (the all-reduce in flight contending with them), is what a larger batch spreads, in every step: its share is
    that time over the watched steps' wall time. The model's time is the median step's: a stall in some steps
    (another thread holding the interpreter, a checkpoint) is not the batch's fixed cost (periodic_stall's)."""
    probe, totals = seen.probe, seen.totals
    collective_s = seen.own_collective_s() / totals.steps
    model_s = totals.wall_s - totals.data_wait_s - totals.copy_s - totals.sync_s - seen.own_collective_s()
    if probe is None or model_s <= 0:
        return None
    per_step = [r.wall_s - r.data_wait_s - r.copy_s - r.sync_s - collective_s for r in seen.steps]
    per_forward_s = statistics.median(per_step) / batches
    if per_forward_s <= 0:
        return None
    # several ranks: the forward and backward rank 0 measured beyond the probe's, which ran without an all-reduce in
    # flight, is that all-reduce's contention (threads on the same cores, memory traffic), not the batch's cost
    mine = next((r for r in seen.ranks.per_rank if r.rank == 0), None) if seen.ranks.world_size > 1 else None
    overlap_s = 0.0
    if mine is not None:
        overlap_s = max(0.0, (mine.forward_ms + mine.backward_ms) / 1000.0 / batches - probe.seconds[0][1])
    fixed_s = max(0.0, per_forward_s - probe.per_sample_s * probe.batch - overlap_s)
    fixed_fraction = fixed_s / per_forward_s
    share = min(totals.share(fixed_s * batches * totals.steps), totals.share(model_s))
    evidence = {"batch_size": probe.batch,
                "probe_ms": {f"{factor}x": round(1000.0 * s, 4) for factor, s in probe.seconds},
                "probe_repeats": probe.repeats, "per_sample_ms": 1000.0 * probe.per_sample_s,
                "per_sample_from": "slope" if probe.slope_resolved else "upper bound",
                "model_ms_per_batch": 1000.0 * per_forward_s, "fixed_ms_per_batch": 1000.0 * fixed_s,
                "fixed_share_of_model": fixed_fraction, "device_busy": seen.device_busy()}
    if mine is not None:
        evidence["all_reduce_overlap_ms"] = 1000.0 * overlap_s
    if batches > 1:
        evidence["batches_per_step"] = batches
    supporting = totals.steps if probe.repeats >= 3 else 0
    return new_finding(SmallBatch.NAME, severity(share), share, evidence,
                       fix(probe.batch, accumulated=batches, fixed=evidence), confidence(supporting))


class SmallBatch(Kind):
    NAME = "small_batch"
    MEANING = "the device is underfilled: raise the batch or fuse"
    RECOMMEND_AT, RECOMMEND_SOURCE = OWN_LEVEL, OWN_LEVEL_SOURCE
    FIGURES = ("batch_size", "device_busy")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        batch, batches = seen.model_batch()
        if seen.on_gpu and (found := underfilled(seen)) is not None:
            return found
        if batch is None or batch >= SMALL_BATCH:
            return None
        if (found := probed(seen, batches)) is not None:
            return found
        totals = seen.totals
        model_step_s = (totals.wall_s - totals.data_wait_s) / totals.steps / batches
        evidence = {"batch_size": batch, "model_step_ms": 1000.0 * model_step_s, "device_busy": seen.device_busy()}
        if batches > 1:
            evidence["batches_per_step"] = batches
        if seen.on_gpu:
            busy = seen.busy()
            if busy is None or busy >= LOW_DEVICE_BUSY:
                return None
            evidence["device_busy"] = busy
            share = unexplained_idle(seen, busy)
            strong = host_bound_gate(seen) is not None
            supporting = seen.count(lambda r: r.compute_s is not None and r.compute_s < LOW_DEVICE_BUSY * r.wall_s)
            return new_finding(self.NAME, "medium" if strong else "low", share, evidence,
                               fix(batch, accumulated=batches), confidence(supporting) if strong else "low")
        if model_step_s >= SHORT_CPU_STEP_S:
            return None
        notes.unmeasured("throughput at other batch sizes: not measured, so small_batch on the CPU is a heuristic "
                         "(batch and step time) and claims no share of the step")
        return new_finding(self.NAME, "low", 0.0, evidence, fix(batch, accumulated=batches), "low")

    def claims(self, finding: Finding) -> str:
        """The part of the step it claims (shares.py): busy time in kernels that leave SMs idle (GPM), the model's
        part for the fixed cost the batch probe measured, a GPU's idle time (a small batch on a GPU busy under half
        the step), else the model's part (the CPU)."""
        if "sm_idle_share_of_busy" in finding.evidence:
            return "busy"
        if "fixed_share_of_model" in finding.evidence:
            return "model"
        return "idle" if finding.evidence.get("device_busy") is not None else "model"

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """The DataLoader's batch_size doubled: a measurement in samples/s, not a drop-in fix."""
        return [LoaderChange("double_batch", batch_factor=2)], None


def fix(batch_size: int | None, sm_activity_percent: float | None = None,
        accumulated: int = 1, fixed: dict | None = None) -> tuple[str, str]:
    """The fix for an underfilled device: a batch known to be small, or kernels that occupy few SMs (GPM).
    `accumulated`: batches per optimizer step (gradient accumulation): then the lever is a larger batch with fewer
    accumulated, the same samples per step. `fixed`: the batch probe's evidence (`probed`), said first."""
    if fixed is not None:
        words, snippet = _batch_fix(batch_size, accumulated=accumulated)
        about = "about" if fixed["per_sample_from"] == "slope" else "at most"
        measured = (f"A batch of {batch_size} costs {fixed['model_ms_per_batch']:.2f} ms of model time, of which "
                    f"{about} {fixed['per_sample_ms'] * batch_size:.3g} ms grows with the samples "
                    f"({fixed['per_sample_ms']:.3g} ms each, from the doctor's probe at 1x, 2x and 4x the batch): "
                    f"{'' if about == 'about' else 'at least '}{fixed['fixed_share_of_model']:.0%} of it is "
                    f"fixed cost per batch (the optimizer step, the Python around the model, each operator's "
                    f"dispatch), which a larger batch spreads over more samples. ")
        return measured + words, snippet
    return _batch_fix(batch_size, sm_activity_percent, accumulated)


def _batch_fix(batch_size: int | None, sm_activity_percent: float | None = None,
               accumulated: int = 1) -> tuple[str, str]:
    if batch_size is None or sm_activity_percent is not None:
        seen = f"the kernels kept only {sm_activity_percent:.0f}% of the SMs busy" if sm_activity_percent is not None \
            else "the device is underfilled"
        batch = f"a batch of {batch_size}" if batch_size else "the batch"
        fix = (f"While the GPU ran kernels, {seen}: each kernel is too small to fill the device. Raise {batch} "
               f"(and the learning rate with it), fuse small operations with torch.compile, or use a smaller GPU.")
        snippet = ("model = torch.compile(model)  # fuses small kernels into fewer, larger ones\n"
                   "loader = torch.utils.data.DataLoader(dataset, batch_size=2 * batch_size, ...)")
        if accumulated > 1:
            fix += f" With {accumulated} batches accumulated per step, raise the batch and accumulate fewer."
        return fix, snippet
    if accumulated > 1:
        step = batch_size * accumulated
        fix = (f"A batch of {batch_size} leaves the device underfilled, and {accumulated} of them are accumulated "
               f"into each optimizer step ({step} samples). Load larger batches and accumulate fewer: the same "
               f"{step} samples per step, the same learning rate, fewer and larger operators.")
        snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size={step}, ...)\n"
                   f"accumulation_steps = 1  # was {accumulated}: still {step} samples per optimizer step\n"
                   f"# if {step} samples do not fit in memory: batch_size={step // 2 if step >= 2 else 1}, "
                   f"accumulation_steps = {2 if step >= 2 else 1}")
        return fix, snippet
    larger = batch_size * 4
    fix = (f"A batch of {batch_size} leaves the device underfilled. Raise the batch (try {batch_size * 2} and "
           f"{larger}) and scale the learning rate with it; if memory is the limit, bf16 autocast halves the "
           f"activations.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size={larger}, ...)\n"
               f"for group in optimizer.param_groups:\n"
               f"    group[\"lr\"] = base_lr * {larger} / {batch_size}  # linear scaling; warm up if it diverges")
    return fix, snippet
