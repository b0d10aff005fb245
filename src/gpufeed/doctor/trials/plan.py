"""The plan of `--try`: which experiments test each finding's fix, and which of them run.

Each kind that has an experiment has a function here, `<kind>_experiments(finding, cuda) -> (experiments,
reason)`, reading the numbers its finding module measured (findings/kinds/<kind>.py's evidence); `reason` says why none
or no more are tried. A kind without a line in `EXPERIMENTS` has none (`no_experiment`): no change made from
outside the script tests its fix. The changes themselves are changes.py's (and async_item.py's).

`plan_experiments` takes them for the report's findings of severity high or medium, in the report's order,
MAX_EXPERIMENTS at most; the rest, and the kinds or devices where no change can act, are notes.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from gpufeed.doctor.findings.kinds import communication, host_to_device, input_bound, precision, small_batch, sync_stall
from gpufeed.doctor.findings.report import Finding, Report
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.notes import Note
from gpufeed.doctor.trials.async_item import ASYNC_ITEM
from gpufeed.doctor.trials.changes import (
    REPLAY_BATCHES,
    Experiment,
    autocast_forward,
    ddp_experiment,
    loader_experiment,
    replay,
    replayed,
)

# gpufeed's choice: three experiments, each 2 x runs.REPEATS runs, keep --try to minutes for a typical script.
MAX_EXPERIMENTS = 3
LEADING = ("high", "medium")
NO_EXPERIMENT = "not tried: no experiment for this kind of finding"

Choice = tuple[list[Experiment], str | None]


def no_experiment(finding: Finding, cuda: bool) -> Choice:
    """The --try answer of a kind with no experiment: no change made from outside the script tests its fix."""
    return [], NO_EXPERIMENT


def input_bound_experiments(finding: Finding, cuda: bool) -> Choice:
    """The replay (the bound if input were free), and the experiment of the fix input_bound recommends: the
    workers kept alive when restarts are most of the wait; else the suggested workers (and pinned memory on CUDA)
    while the loader has fewer or does not pin. A cheaper sample (gpufeed pack and Feed) has no experiment: the
    reason says so, and the finding's measured gain is then None with the bound beside it."""
    kind, evidence = input_bound.KIND, finding.evidence
    found = [Experiment(kind, "replay", f"replayed the first {REPLAY_BATCHES} batches from memory instead of the "
                        "DataLoader (the bound if input were free)", replay, min_warmup=REPLAY_BATCHES,
                        check=replayed, role="bound")]
    workers = evidence.get("suggested_workers") or min(os.cpu_count() or 1, input_bound.MAX_SUGGESTED_WORKERS)
    current = evidence.get("loader_workers")
    restarts = evidence.get("restart_share_of_wait") or 0.0
    framework = evidence.get("framework") or "torch"
    if current and restarts >= input_bound.RESTART_SHARE:
        path = words.experiment_path(framework, {"num_workers": str(current), "persistent_workers": "True"})
        found.append(loader_experiment(kind, "persistent_workers", workers=current, path=path))
        return found, None
    more = current is None or current < workers
    pin = cuda and evidence.get("pin_memory") is not True
    if more or pin:
        changes = {**({"num_workers": str(workers), "persistent_workers": "True"} if more else {}),
                   **({"pin_memory": "True"} if pin else {})}
        found.append(loader_experiment(kind, "workers", workers=workers if more else None, pin_memory=pin,
                                       path=words.experiment_path(framework, changes)))
        return found, None
    return found, (f"the fix recommended (a cheaper sample: gpufeed pack and gpufeed.Feed) has no experiment: "
                   f"the loader already has {current} workers (suggested {workers}), so only the bound if input "
                   f"were free is measured")


def host_to_device_experiments(finding: Finding, cuda: bool) -> Choice:
    if cuda and finding.evidence.get("pin_memory") is not True:
        path = words.experiment_path(finding.evidence.get("framework") or "torch", {"pin_memory": "True"})
        return [loader_experiment(host_to_device.KIND, "pin_memory", pin_memory=True, path=path)], None
    return [], "not tried: the loader already pins memory, or the device is not CUDA"


def sync_stall_experiments(finding: Finding, cuda: bool) -> Choice:
    if not cuda:
        return [], "not tried: on the CPU, .item() waits for no device, so there is no wait to defer"
    return [ASYNC_ITEM], None


def small_batch_experiments(finding: Finding, cuda: bool) -> Choice:
    return [loader_experiment(small_batch.KIND, "double_batch", batch_factor=2)], None


def precision_experiments(finding: Finding, cuda: bool) -> Choice:
    if "autocast_seen" not in finding.evidence:
        return [], "not tried: float64 to float32 needs the model and its data cast in the script"
    if not cuda:
        return [], "bf16 autocast: not tried, the device is the CPU"
    stand_in = words.autocast_path(finding.evidence.get("framework") or "torch")
    return [Experiment(precision.KIND, "bf16_autocast", "the outermost forward under torch.autocast('cuda', "
                       f"dtype=torch.bfloat16){stand_in}", lambda changes: autocast_forward(changes, "cuda"))], None


def communication_experiments(finding: Finding, cuda: bool) -> Choice:
    """The fixes that are DDP settings, run on every rank (`doctor --nproc-per-node N --try`): gradients as views
    of the buckets, and the all-reduce in float16. A larger batch or no_sync() accumulation change the
    optimisation: not tried."""
    kind = communication.KIND
    return [ddp_experiment(kind, "gradient_as_bucket_view", gradient_as_bucket_view=True),
            ddp_experiment(kind, "fp16_compress", fp16_compress=True)], (
        "a larger per-rank batch and no_sync() accumulation: not tried, they change the optimisation")


EXPERIMENTS: dict[str, Callable[[Finding, bool], Choice]] = {
    input_bound.KIND: input_bound_experiments,
    host_to_device.KIND: host_to_device_experiments,
    sync_stall.KIND: sync_stall_experiments,
    small_batch.KIND: small_batch_experiments,
    precision.KIND: precision_experiments,
    communication.KIND: communication_experiments,
}


def experiments_for(finding: Finding, cuda: bool) -> Choice:
    """The experiments that test `finding`'s fix on this device, and why none or no more are tried."""
    return EXPERIMENTS.get(finding.kind, no_experiment)(finding, cuda)


def plan_experiments(report: Report) -> tuple[list[Experiment], list[Note]]:
    """The experiments for the report's high and medium findings (`experiments_for`), in its order
    (MAX_EXPERIMENTS at most), and a note for each finding or experiment left out."""
    cuda = report.verdict.device.startswith("cuda")
    planned, unmeasured = [], []
    leading = [finding for finding in report.findings if finding.severity in LEADING]
    if not leading:
        return [], [Note("unmeasured", "verified fixes (--try): none tried, no finding of high or medium severity")]
    for finding in leading:
        found, reason = experiments_for(finding, cuda)
        if reason:
            unmeasured.append(Note("unmeasured", f"verified fix for {finding.kind}: {reason}"))
        for experiment in found:
            if len(planned) < MAX_EXPERIMENTS:
                planned.append(experiment)
            else:
                unmeasured.append(Note("unmeasured", f"verified fix for {finding.kind} ({experiment.name}): not "
                                                     f"tried, --try runs {MAX_EXPERIMENTS} experiments at most"))
    return planned, unmeasured
