"""small_batch: each batch pays a fixed cost (or, on a GPU, leaves the SMs idle) for few samples; a larger batch
spreads it.

Judged on the batch the model sees (`Observation.model_batch`: with gradient accumulation one loader batch):
- on any device, when the batch probe ran (observe/probe.py: a forward and backward at 1x, 2x and 4x the batch,
  after the watch; on the CPU its times scaled to the watched steps' forward and backward, `in_watched_scale`):
  the model's time per batch less the batch times the probe's per-sample cost is fixed cost, a
  larger batch's to spread; the share is that fraction of the model's part of the step (`probed`), graded as
  shares are (grading.severity). What the finding recommends is the batch of the probe's factor that gains most
  (`batch_gain`): k times the batch spreads the fixed cost over k times the samples, so it saves (1 - 1/k) of it
  per sample, not all of it; the gain is computed from the probe's time at that factor, and a factor whose probe
  time grew more than k-fold (slower per sample) is never proposed. It is the verdict only when that gain is at
  least GAIN_LEVEL of the step (`set_aside`), and it gives no advice when no factor is faster per sample or the
  share rounds to 0%;
- on a GPU without a probe, two ways: the device is busy but its kernels occupy few SMs (GPM SM activity below
  LOW_SM_ACTIVITY_PERCENT while the device runs kernels at least LOW_DEVICE_BUSY of the time; utilization.gpu
  reads 100% whenever any kernel runs, GPM's SM activity the share of SMs that had work; the share is the step
  time in kernels that left the rest of the SMs idle), or a batch under SMALL_BATCH on a device busy less than
  LOW_DEVICE_BUSY (the share is the idle share waits, copies and syncs leave; medium when the host-bound gate
  holds, else low); both judged on their share against GAIN_LEVEL (no gain is computed without the probe);
- on the CPU without a probe, a batch under SMALL_BATCH whose model time per batch is under SHORT_CPU_STEP_S: a
  heuristic, low, claiming no share (throughput at other batch sizes is not measured). A step whose measured
  arithmetic is tiny for its time (its FLOPs against the device's peak, per operator) is launch_overhead's first
  way, which also names the batch as the lever; this one reads the batch size alone.
The fix names the framework's setting (frameworks/words.py's `larger_batch`: TrainingArguments'
per_device_train_batch_size, the DataLoader that Lightning's train_dataloader() returns, the DataLoader before
accelerator.prepare, or the script's), and the learning rate with it.
--try: the DataLoader's batch_size doubled (a measurement, not a drop-in fix: it changes the optimisation).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import Declared, LoaderChange
from gpufeed.doctor.findings.grading import (
    INPUT_SHARE_MEDIUM,
    LOW_DEVICE_BUSY,
    confidence,
    host_bound_gate,
    new_finding,
    severity,
    timed_elsewhere,
    unexplained_idle,
    watched_model_s,
)
from gpufeed.doctor.findings.kind import Evidence, Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes
from gpufeed.doctor.observation import SMALL_BATCH, BatchProbe

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: on the CPU without the batch probe, a step under 10 ms is short enough that fixed per-step costs
# (Python, per-operator dispatch of some microseconds) weigh on it. SMALL_BATCH is observation.py's.
SHORT_CPU_STEP_S = 0.010
# NVIDIA DCGM user guide, profiling metrics, SM Activity (DCGM_FI_PROF_SM_ACTIVE, what NVML's GPM SM_UTIL reads):
# "A value of 0.8 or greater is necessary, but not sufficient, for effective use of the GPU. A value less than
# 0.5 likely indicates ineffective GPU usage." utilization.gpu reads 100% whenever any kernel runs.
LOW_SM_ACTIVITY_PERCENT = 50.0
# gpufeed's choice, argued (issue 32): small_batch is recommended when the batch it proposes would save at least
# 10% of the step (1.11x the samples per second). Twice the 5% at which torch-tb-profiler recommends a fix for
# DataLoader time (input_bound's level; host_to_device and the kinds without a level of their own take it too), and
# the 10% it sets for communication: a loader fix leaves the training as it was, while a larger batch changes the
# optimisation (the learning rate scaled with it, often a warm-up; k times fewer steps for the same epochs; what it
# does to generalisation is the user's to check), so it costs a tuning run a loader fix does not and must buy more.
# A k-times batch saves (1 - 1/k) of the fixed share, so a 4x batch needs a fixed share of 13.3% (0.10 / 0.75), a
# 2x batch 20%. The share, compared with the level first (verdict.reaches), is an upper bound of the gain.
GAIN_LEVEL = 2 * INPUT_SHARE_MEDIUM
# gpufeed's choice: the probe's scale to the watched steps (`in_watched_scale`) is said in the fix when it is 5% or
# more off 1 (the fastest of a few rounds after the watch against the median of the watched steps differ by that
# much on a quiet machine)
SCALE_SAID = 0.05


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
    return new_finding(SmallBatch.NAME, severity(share), share, evidence,
                       fix(batch, sm, batches, setup=seen.setup), confidence(supporting))


def probe_disagrees(seen: Observation, batches: int) -> str | None:
    """Why the batch probe did not measure the step it probes, or None: it agrees. Not when a factor's fastest run
    waited for a core too long (observation.waited_too_long: its fixed cost would be the waits'), nor when its
    fastest 1x round is slower than DRIFT times the slowest watched step's forward and backward per batch
    (grading.timed_elsewhere; its per-sample cost would then call a healthy loop's step fixed cost)."""
    probe = seen.probe
    if probe is None or not probe.seconds:
        return None
    waited = probe.waited_runs()
    if waited:
        runs = ", ".join(f"{factor}x {1000 * w:.3g} of {1000 * s:.3g} ms" for factor, s, w in waited)
        return (f"batch probe not used: its fastest runs waited for a core ({runs}: other processes held the cores, "
                f"and each operator waits for its slowest thread, a cost per operator that a larger batch would seem "
                f"to spread), so small_batch is judged without it")
    found = timed_elsewhere(seen, probe.seconds[0][1], batches, "batch probe", "at 1x")
    return None if found is None else found + ", so small_batch is judged without it"


def padding_contradicts(seen: Observation) -> str | None:
    """Why the batch probe's per-sample cost cannot be right, or None: the padding trial (observe/padding.py) cut the
    padding off a batch of the probe's size and saved more than the probe says all its samples cost. Cutting padding
    removes only work that grows with the rows (every row's padded positions), so its saving is at most the
    samples' cost: a probe that says less under-measured the slope (a busy machine), and its fixed cost would be
    the padding's. A trial timed on one thread (PaddingTrial.threads) is in another scale than the probe: not
    compared."""
    probe, padding = seen.probe, seen.padding
    trial = padding.trial if padding is not None else None
    if probe is None or trial is None or trial.rows != probe.batch or trial.threads is not None:
        return None
    saved_s, samples_s = trial.seconds - trial.trimmed_seconds, probe.per_sample_s * probe.batch
    if saved_s <= samples_s:
        return None
    return (f"batch probe not used: its {probe.batch} samples cost {1000.0 * samples_s:.3g} ms by its slope, less "
            f"than the {1000.0 * saved_s:.3g} ms the padding trial saved by cutting their padding alone: it "
            f"under-measured the per-sample cost (the machine busier while it ran?), so small_batch is judged "
            f"without it")


def probed(seen: Observation, batches: int) -> Finding | None:
    """The step's fixed cost from the batch probe (observe/probe.py): the model's time per forward (the step
    less its input: the data wait or the loop's own input work, StepRecord.input_s; its copies, syncs and, with
    several ranks, its wait at the all-reduce) less the batch times the probe's per-sample cost, and less, with
    several ranks, what its forward and backward took beyond the probe's (the all-reduce in flight contending with
    them), is what a larger batch spreads, in every step: its share is that time over the watched steps' wall time.
    The model's time is the median step's: a stall in some steps (another thread holding the interpreter, a
    checkpoint) is not the batch's fixed cost (periodic_stall's)."""
    probe, scale = in_watched_scale(seen, batches)
    totals = seen.totals
    collective_s = seen.own_collective_s() / totals.steps
    model_s = totals.wall_s - totals.input_s - totals.copy_s - totals.sync_s - seen.own_collective_s()
    if probe is None or model_s <= 0:
        return None
    per_step = [r.wall_s - r.input_s - r.copy_s - r.sync_s - collective_s for r in seen.steps]
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
                "probe_ms": {f"{factor}x": round(1000.0 * s, 4) for factor, s in seen.probe.seconds},
                "probe_scale": scale, "probe_repeats": probe.repeats, "per_sample_ms": 1000.0 * probe.per_sample_s,
                "per_sample_from": "slope" if probe.slope_resolved else "upper bound",
                "model_ms_per_batch": 1000.0 * per_forward_s, "fixed_ms_per_batch": 1000.0 * fixed_s,
                "fixed_share_of_model": fixed_fraction, "device_busy": seen.device_busy()}
    if mine is not None:
        evidence["all_reduce_overlap_ms"] = 1000.0 * overlap_s
    if batches > 1:
        evidence["batches_per_step"] = batches
    step_s = totals.wall_s / (totals.steps * batches)  # the mean step per batch, as the share's
    factor, gain = batch_gain(probe, per_forward_s - overlap_s, step_s, share, batches)
    slower = [k for k, seconds in probe.seconds[1:] if seconds >= k * probe.seconds[0][1]]
    evidence.update({"proposed_factor": factor, "proposed_batch": factor * probe.batch if factor else None,
                     "gain_share_of_step": gain,
                     "samples_per_s_ratio": 1.0 / (1.0 - gain) if gain is not None else None,
                     "slower_per_sample_at": slower})
    supporting = totals.steps if probe.repeats >= 3 else 0
    remedy = fix(probe.batch, accumulated=batches, fixed=evidence, on_gpu=seen.on_gpu, setup=seen.setup)
    return new_finding(SmallBatch.NAME, severity(share), share, evidence, _advised(remedy, share, factor),
                       confidence(supporting))


def in_watched_scale(seen: Observation, batches: int) -> tuple[BatchProbe | None, float]:
    """The batch probe with its times in the watched steps' scale, and the factor applied: on the CPU, on one
    rank, each time times the watched steps' median forward and backward per batch over the probe's 1x time (1.0
    elsewhere, or without those parts). The probe's rounds ran interleaved, so the ratios between its times hold
    whatever the machine's speed after the watch; its milliseconds do not: on a machine another process loads,
    the watched steps ran 4x slower than at their fastest (GPT-2, 2 cores, two spinning processes), and a probe
    that ran between bursts made most of their time look fixed. Scaled, the probe's per-sample cost is the
    watched steps' own. Not on a GPU, where the host's forward and backward times are launches, not the work;
    nor with several ranks, where rank 0's forward and backward beyond the probe's is the all-reduce's contention
    (`probed`)."""
    probe = seen.probe
    if probe is None or not probe.seconds or seen.on_gpu or seen.ranks.world_size > 1:
        return probe, 1.0
    parts = watched_model_s(seen, batches)
    one = probe.seconds[0][1]
    if len(parts) < len(seen.steps) or not parts or one <= 0:
        return probe, 1.0
    scale = statistics.median(parts) / one
    return BatchProbe(probe.batch, tuple((factor, seconds * scale) for factor, seconds in probe.seconds),
                      probe.repeats, probe.waited), scale


def batch_gain(probe: BatchProbe, model_s: float, step_s: float, share: float,
               accumulated: int = 1) -> tuple[int | None, float | None]:
    """(the probe's factor k whose batch saves the most, the share of the step it saves), or (None, None) when no
    factor above 1 ran faster per sample in the probe (its time at k more than k times its time at 1x). With
    `accumulated` batches per optimizer step only factors that divide it are proposed (k times the batch,
    accumulated / k of them: the same samples per optimizer step).
    `model_s`: the model's time per batch in the step (of which the probe's forward and backward is a part);
    `step_s`: the step's wall time per batch. At k times the batch the step's other parts (data wait, copies,
    syncs) grow k-fold with the samples, and the model's time by what the probe measured: t_k - t_1, or, when the
    probe's time did not grow (its per-sample cost an upper bound), (k - 1) x batch x that cost. The gain is what
    that saves of k steps' time: ((k - 1) model_s - growth) / (k step_s), which with the probe's slope is
    (1 - 1/k) x the fixed cost per batch over step_s; at most `share` (the fixed cost it claims) and 1 - 1/k."""
    one = probe.seconds[0][1]
    best: tuple[int | None, float | None] = (None, None)
    for factor, seconds in probe.seconds[1:]:
        if seconds >= factor * one or (accumulated > 1 and accumulated % factor):
            continue  # slower per sample at this factor, or not the same samples per step: never proposed
        growth = seconds - one if probe.slope_resolved else (factor - 1) * probe.batch * probe.per_sample_s
        saved = ((factor - 1) * model_s - growth) / (factor * step_s)
        gain = min(share, 1.0 - 1.0 / factor, max(0.0, saved))  # a k-times batch's step is no shorter than a 1x one
        if best[1] is None or gain > best[1]:
            best = (factor, gain)
    return best


@dataclass(frozen=True)
class SmallBatchEvidence(Evidence):
    """The keys `set_aside` and `verdict_words` read: the probe's proposed batch and its gain (`probed`)."""

    probe_ms: dict | None
    proposed_factor: int | None
    proposed_batch: int | None
    gain_share_of_step: float | None
    samples_per_s_ratio: float | None
    slower_per_sample_at: list | None


class SmallBatch(Kind):
    NAME = "small_batch"
    MEANING = ("each batch pays a fixed cost (on a GPU: leaves SMs idle) for few samples: a larger batch spreads it, "
               "but changes the training")
    RECOMMEND_AT = GAIN_LEVEL
    RECOMMEND_SOURCE = ("gpufeed's choice: the proposed batch must save at least 10% of the step (small_batch.py: "
                        "twice torch-tb-profiler's 5% for a loader fix, as a larger batch changes the optimisation; "
                        "a k-times batch saves (1 - 1/k) of the fixed share)")
    # its probe times the padded batch as it came: cut to its longest row, a batch costs less and its fixed share
    # is another; so it is judged after padding_waste (verdict.py)
    JUDGED_AFTER = ("padding_waste",)
    FIGURES = ("batch_size", "device_busy")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        batch, batches = seen.model_batch()
        if seen.on_gpu and (found := underfilled(seen)) is not None:
            return found
        if batch is None or batch >= SMALL_BATCH:
            return None
        disagrees = probe_disagrees(seen, batches) or padding_contradicts(seen)
        if disagrees is not None:
            notes.run(disagrees)
        elif (found := probed(seen, batches)) is not None:
            return found
        totals = seen.totals
        model_step_s = (totals.wall_s - totals.input_s) / totals.steps / batches
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
                               fix(batch, accumulated=batches, setup=seen.setup),
                               confidence(supporting) if strong else "low")
        if model_step_s >= SHORT_CPU_STEP_S:
            return None
        notes.unmeasured("throughput at other batch sizes: not measured, so small_batch on the CPU is a heuristic "
                         "(batch and step time) and claims no share of the step")
        return new_finding(self.NAME, "low", 0.0, evidence,
                           fix(batch, accumulated=batches, on_gpu=False, setup=seen.setup), "low")

    def set_aside(self, finding: Finding) -> str | None:
        """Not the verdict when the batch probe ran and the batch it proposes saves under GAIN_LEVEL of the step,
        or no larger batch ran faster per sample (the module docstring)."""
        evidence = SmallBatchEvidence.of(finding.evidence)
        if evidence.probe_ms is None:
            return None  # judged without the probe: its share against the level
        times = ", ".join(f"{factor} {_ms(ms)} ms" for factor, ms in evidence.probe_ms.items())
        if evidence.proposed_factor is None:
            why = (f"in the batch probe every larger batch was slower per sample ({times})"
                   if len(evidence.slower_per_sample_at or ()) == len(evidence.probe_ms) - 1 else
                   f"no larger batch the probe ran ({times}) both ran faster per sample and keeps the samples per "
                   f"optimizer step")
            return (f"verdict: not small_batch, though {finding.share:.0%} of the step is fixed cost per batch: "
                    f"{why}, so no larger batch is advised")
        gain = evidence.gain_share_of_step
        if round(gain, 12) >= GAIN_LEVEL:
            return None
        return (f"verdict: not small_batch, though {finding.share:.0%} of the step is fixed cost per batch: a batch "
                f"of {evidence.proposed_batch} ({evidence.proposed_factor}x) would save about {gain:.0%} of the "
                f"step ({evidence.samples_per_s_ratio:.2f}x the samples per second; probe {times}), under the "
                f"{GAIN_LEVEL:.0%} at which a change to the training itself is recommended")

    def verdict_words(self, share: float | None, finding: dict) -> str | None:
        """The fixed cost's share, and the gain of the batch the probe proposes (when it ran)."""
        evidence = SmallBatchEvidence.of(finding.get("evidence") or {})
        if share is None or evidence.proposed_factor is None or evidence.gain_share_of_step is None:
            return None
        grade = f" ({finding['severity']})" if finding.get("severity") else ""
        return (f"{share:.0%} of the step is fixed cost per batch{grade}; a batch of {evidence.proposed_batch} "
                f"({evidence.proposed_factor}x) would save about {evidence.gain_share_of_step:.0%} of the step "
                f"({evidence.samples_per_s_ratio:.2f}x the samples per second)")

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


def _ms(milliseconds: float) -> str:
    """Milliseconds as a person writes them: "0.4", "12.5", "2,707", "10,075"."""
    return f"{milliseconds:,.0f}" if milliseconds >= 100 else f"{milliseconds:.3g}"


def _advised(remedy: tuple[str, str], share: float, factor: int | None) -> tuple[str, str]:
    """The fix, or none when the probe measured no fixed cost to spread (a share that rounds to 0%) or no larger
    batch faster per sample (`factor` None): a larger batch would gain nothing it measured, so no advice is given;
    the evidence stays."""
    return remedy if round(share, 2) > 0 and factor is not None else ("", "")


def fix(batch_size: int | None, sm_activity_percent: float | None = None, accumulated: int = 1,
        fixed: dict | None = None, on_gpu: bool = True, setup: Setup = PLAIN) -> tuple[str, str]:
    """The fix for a small batch: a batch known to be small, or kernels that occupy few SMs (GPM), in the words of
    the framework that sets the batch (`setup`). `accumulated`: batches per optimizer step (gradient
    accumulation): then the lever is a larger batch with fewer accumulated, the same samples per step. `fixed`:
    the batch probe's evidence (`probed`), said first with the gain of the batch it proposes."""
    if fixed is None:
        return _batch_fix(batch_size, sm_activity_percent, accumulated, on_gpu, setup=setup)
    factor = fixed["proposed_factor"] or (accumulated if accumulated > 1 else 4)
    advice, snippet = _batch_fix(batch_size, accumulated=accumulated, on_gpu=on_gpu, factor=factor, setup=setup)
    about = "about" if fixed["per_sample_from"] == "slope" else "at most"
    measured = (f"A batch of {batch_size} costs {fixed['model_ms_per_batch']:.2f} ms of model time, of which "
                f"{about} {fixed['per_sample_ms'] * batch_size:.3g} ms grows with the samples "
                f"({fixed['per_sample_ms']:.3g} ms each, from the doctor's probe at 1x, 2x and 4x the batch): "
                f"{'' if about == 'about' else 'at least '}{fixed['fixed_share_of_model']:.0%} of it is "
                f"fixed cost per batch (the optimizer step, the Python around the model, each operator's "
                f"dispatch), which a larger batch spreads over more samples. ")
    scale = fixed.get("probe_scale") or 1.0
    if abs(scale - 1.0) >= SCALE_SAID:
        measured += (f"(The probe ran {'faster' if scale > 1 else 'slower'} than the watched steps, "
                     f"{_ms(fixed['probe_ms']['1x'])} ms at 1x against their {_ms(fixed['probe_ms']['1x'] * scale)} "
                     f"ms forward and backward: its times are taken x{scale:.2f}, their ratios as measured.) ")
    if fixed["proposed_factor"] is not None:
        probe = fixed["probe_ms"]
        measured += (f"A batch of {factor * batch_size} ({factor}x) would spread the "
                     f"{fixed['fixed_ms_per_batch']:.3g} ms fixed cost over {factor}x the samples: about "
                     f"{fixed['samples_per_s_ratio']:.2f}x the samples per second, "
                     f"saving {fixed['gain_share_of_step']:.0%} of the step's time per sample (from the probe: 1x "
                     f"{_ms(probe['1x'])} ms, {factor}x {_ms(probe[f'{factor}x'])} ms). ")
    return measured + advice, snippet


def _batch_fix(batch_size: int | None, sm_activity_percent: float | None = None, accumulated: int = 1,
               on_gpu: bool = True, factor: int | None = None, setup: Setup = PLAIN) -> tuple[str, str]:
    """The fix's words; `factor`: the proposed batch over this one (the probe's; else all the batches accumulated
    in one, or 4)."""
    factor = factor or (accumulated if accumulated > 1 else 4)
    if batch_size is None or sm_activity_percent is not None:
        seen = f"the kernels kept only {sm_activity_percent:.0f}% of the SMs busy" if sm_activity_percent is not None \
            else "the device is underfilled"
        batch = f"a batch of {batch_size}" if batch_size else "the batch"
        change, code = words.larger_batch(setup, batch_size or "batch_size", 2, accumulated)
        fix = (f"While the GPU ran kernels, {seen}: each kernel is too small to fill the device. Raise {batch}: "
               f"{change}; or fuse small operations with torch.compile, or use a smaller GPU.")
        snippet = "model = torch.compile(model)  # fuses small kernels into fewer, larger ones\n" + code
        return fix, snippet
    small = (f"A batch of {batch_size} leaves the device underfilled" if on_gpu else
             f"A batch of {batch_size} pays each step's fixed cost for few samples")
    if accumulated > 1:
        step = batch_size * accumulated
        change, snippet = words.larger_batch(setup, batch_size, factor, accumulated)
        fix = (f"{small}, and {accumulated} of them are accumulated into each optimizer step ({step} samples). "
               f"Load larger batches and accumulate fewer: {change}. The same {step} samples per step, the same "
               f"learning rate, fewer and larger operators")
        fix += (f"; if {step} samples do not fit in memory, accumulate 2 of {step // 2}." if factor == accumulated
                and step >= 4 else ".")
        return fix, snippet
    change, snippet = words.larger_batch(setup, batch_size, factor)
    mixed, _ = words.mixed_precision(setup, "cuda" if on_gpu else "cpu")
    fix = (f"{small}. A larger batch changes the training (the learning rate, the steps per epoch): {change}; if "
           f"memory is the limit, bf16 mixed precision halves the activations: {mixed}.")
    return fix, snippet
