"""communication: the gradient all-reduce is not hidden behind the backward pass (distributed runs).

Judged from the gathered ranks (`Ranks`, ranks/context.py; ranks/timing.py times DDP's all-reduce). The communication a
step pays is the all-reduce waited for after backward on the rank that waited least in that step: it arrived
last, so its wait is the all-reduce itself, not a wait for another rank (that is straggler's); ranks take turns
arriving last, so this is taken per step and averaged (`Ranks.floor_exposed_ms`). Found when it is at least
COMMUNICATION_SHARE_MEDIUM of the median rank's step. Evidence: the bytes all-reduced per step and the bandwidth
reached (bytes over that rank's time in flight). --try (several ranks): gradient_as_bucket_view=True, and DDP's
fp16_compress_hook, each on every rank.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import DdpChange, Declared
from gpufeed.doctor.findings.grading import confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.notes import Notes
from gpufeed.units import bytes_text

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# TensorFlow profiler (the file cited for INPUT_SHARE_* in grading.py): device collectives share, moderate >= 3%,
# high >= 15% (the same grades as kernel launches: launch_overhead.py).
COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH = 0.03, 0.15


class Communication(Kind):
    NAME = "communication"
    MEANING = "gradient all-reduce is not hidden behind compute"
    PART = "collective"  # shares.py: the part of the step its cause lives in
    RECOMMEND_AT = 0.10
    RECOMMEND_SOURCE = ("torch-tb-profiler (RunProfile.analyze) recommends a fix when communication takes over 10% "
                        "of the step")
    FIGURES = ("communication_share", "exposed_ms", "bandwidth_gb_per_s")

    def next_remedy(self, finding: dict) -> str | None:
        return ("more compute per all-reduce: a larger per-rank batch, or accumulation with no_sync() on all "
                "micro-batches but the last (they change the optimisation, so --try does not try them)")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        world, ranks = seen.ranks.world_size, seen.ranks.per_rank
        if world <= 1:
            return None
        if not ranks:
            notes.unmeasured("communication: no rank's all-reduce was gathered")
            return None
        if all(r.bytes_per_step == 0 for r in ranks):
            notes.unmeasured("communication: no DistributedDataParallel gradient all-reduce was seen (other "
                             "collectives are not timed)")
            return None
        least = min(ranks, key=lambda r: r.exposed_ms)
        exposed_ms, in_flight_ms = seen.ranks.floor_exposed_ms, seen.ranks.floor_in_flight_ms
        if exposed_ms is None:  # no per-step readings: the least-waiting rank's means
            exposed_ms, in_flight_ms = least.exposed_ms, least.collective_ms
        step_ms = statistics.median(r.step_ms for r in ranks)
        share = min(1.0, exposed_ms / step_ms)
        if share < COMMUNICATION_SHARE_MEDIUM:
            return None
        nbytes = statistics.median(r.bytes_per_step for r in ranks)
        bandwidth = nbytes / (in_flight_ms / 1000.0) / 1e9 if in_flight_ms > 0 else None
        evidence = {"world_size": world, "communication_share": share, "exposed_ms": exposed_ms,
                    "in_flight_ms": in_flight_ms, "bytes_per_step": nbytes, "bandwidth_gb_per_s": bandwidth,
                    "step_ms": step_ms}
        return new_finding(self.NAME, severity(share, COMMUNICATION_SHARE_MEDIUM, COMMUNICATION_SHARE_HIGH), share,
                           evidence, fix(exposed_ms, nbytes), confidence(min(r.steps for r in ranks)))

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """The fixes that are DDP settings, run on every rank (`doctor --nproc-per-node N --try`): gradients as
        views of the buckets, and the all-reduce in float16. A larger batch or no_sync() accumulation change the
        optimisation: not tried."""
        return [DdpChange("gradient_as_bucket_view", gradient_as_bucket_view=True),
                DdpChange("fp16_compress", fp16_compress=True)], (
            "a larger per-rank batch and no_sync() accumulation: not tried, they change the optimisation")


def fix(exposed_ms: float, nbytes: float) -> tuple[str, str]:
    fix = (f"Each step waits {exposed_ms:.1f} ms for the gradient all-reduce ({bytes_text(nbytes, 'MiB', 1)}) "
           f"after the backward pass: communication is not hidden. Do more compute per all-reduce: a larger per-rank "
           f"batch, or gradient accumulation with the all-reduce skipped under no_sync() on all micro-batches but the "
           f"last; let DDP overlap and copy less (gradient_as_bucket_view=True, static_graph=True when the graph "
           f"does not change, a bucket_cap_mb that starts the first all-reduce earlier); and send half the bytes "
           f"with a compression hook (fp16_compress_hook on any backend, bf16_compress_hook with NCCL).")
    snippet = ("from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
               "model = torch.nn.parallel.DistributedDataParallel(model, device_ids=device_ids,\n"
               "                                                  gradient_as_bucket_view=True, static_graph=True,\n"
               "                                                  bucket_cap_mb=25)\n"
               "model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n"
               "for index, (inputs, targets) in enumerate(loader):\n"
               "    last = (index + 1) % accumulation == 0\n"
               "    with contextlib.nullcontext() if last else model.no_sync():\n"
               "        loss_fn(model(inputs), targets).backward()\n"
               "    if last:\n"
               "        optimizer.step()\n"
               "        optimizer.zero_grad()")
    return fix, snippet
