"""input_bound: the step waits for its next batch; the loader is too slow.

Found when the data wait (time blocked in the training loader's `__next__`, and its `__iter__` and final
StopIteration) is at least INPUT_SHARE_MEDIUM of the step. The fix suggests min(cores, MAX_SUGGESTED_WORKERS)
workers; when the loader has that many already, a cheaper sample (gpufeed pack and Feed); when most of the wait is
its workers starting and stopping (RESTART_SHARE), persistent_workers.

--try: "replay" (the loader's first batches served again from memory: the bound if input were free, reported as
`gain.bound`) and the recommended fix's own experiment (`gain.measured`): "persistent_workers" when restarts are
most of the wait, else "workers" (the suggested workers, persistent, pinned on CUDA) while the loader has fewer
or does not pin.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from gpufeed.doctor.grading import INPUT_SHARE_MEDIUM, confidence, new_finding, severity
from gpufeed.doctor.report import Finding, Notes

if TYPE_CHECKING:
    from gpufeed.doctor.experiments import Experiment
    from gpufeed.doctor.observation import Observation

KIND = "input_bound"
MEANING = "the step waits for the next batch (the loader is too slow)"
# gpufeed's choice: more loader processes than 8 seldom help one GPU and cost memory (one dataset copy each).
MAX_SUGGESTED_WORKERS = 8
# gpufeed's choice: when half the data wait is the loader starting or stopping its workers (__iter__, the final
# StopIteration), the fix is to keep them (persistent_workers), not to add more.
RESTART_SHARE = 0.50


def detect(seen: Observation, notes: Notes) -> Finding | None:
    totals = seen.totals
    share = totals.share(totals.data_wait_s)
    if share < INPUT_SHARE_MEDIUM:
        return None
    workers, cores = seen.loader.workers, seen.host.cpu_count
    if workers is None:
        notes.unmeasured("DataLoader workers: not read (the loader is not a torch DataLoader, or it was not "
                         "reachable)")
    suggested = min(cores, MAX_SUGGESTED_WORKERS) if cores else None
    restart_share = seen.loader.restart_s / totals.data_wait_s
    evidence = {"data_wait_share": share, "mean_wait_ms": 1000.0 * totals.data_wait_s / totals.steps,
                "loader_workers": workers, "pin_memory": seen.loader.pin_memory, "cpu_count": cores,
                "suggested_workers": suggested, "restart_share_of_wait": restart_share}
    supporting = seen.count(lambda r: r.data_wait_s >= INPUT_SHARE_MEDIUM * r.wall_s)
    restarts = restart_share if workers and restart_share >= RESTART_SHARE else None
    return new_finding(KIND, severity(share), share, evidence, fix(suggested, seen.on_gpu, workers, restarts),
                       confidence(supporting))


def fix(workers: int | None, on_gpu: bool, current: int | None = None,
                restart_share: float | None = None) -> tuple[str, str]:
    """`workers`: the suggested count; `current`: the loader's own. When it already has that many, more
    processes cannot help (each would get less of a core): the fix is a cheaper sample. `restart_share`: the
    share of the wait spent starting or stopping the workers, when that is most of it."""
    device = "cuda" if on_gpu else "cpu"
    if restart_share is not None:
        fix = (f"The step waits for its next batch, and {restart_share:.0%} of that wait is the DataLoader starting "
               f"or stopping its {current} worker processes at an epoch's start or end, not loading. Keep them alive "
               f"between epochs: persistent_workers=True (with multiprocessing_context=\"spawn\" each start imports "
               f"torch and your script again in every worker).")
        snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
                   f"                                     num_workers={current}, persistent_workers=True)")
        return fix, snippet
    feed = (f"# pack once (gpufeed pack photos/ data/train.gpuf), then\n"
            f"import gpufeed\n"
            f"feed = gpufeed.Feed(\"data/train.gpuf\", batch_size=batch_size, device=\"{device}\")\n"
            f"for images, labels in feed:\n"
            f"    ...")
    if current is not None and workers is not None and current >= workers:
        fix = (f"The step waits for its next batch, and the DataLoader already has {current} worker processes, as "
               f"many as suggested here ({workers}, from the cores): more would only share the same cores. Make "
               f"each sample cheaper: decode once with `gpufeed pack` and read the packed file with gpufeed.Feed "
               f"(uint8 batches gathered on threads, augmentation done per batch"
               + (" on the device" if on_gpu else "") + ", not per sample in Python), and keep the workers alive "
               "across epochs (persistent_workers=True" + (", with pin_memory=True)." if on_gpu else ")."))
        return fix, feed
    count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
    pin = ", pin_memory=True" if on_gpu else ""
    fix = (f"The step waits for its next batch. Give the DataLoader more worker processes (num_workers={count})"
           + (", pinned memory (pin_memory=True)" if on_gpu else "")
           + " and persistent_workers=True so they survive the epoch; or decode once with `gpufeed pack` and "
             "read the packed file with gpufeed.Feed, which gathers uint8 batches on threads and augments on the "
             "device.")
    snippet = (f"loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,\n"
               f"                                     num_workers={count}{pin}, persistent_workers=True,\n"
               f"                                     prefetch_factor=4)\n"
               f"\n"
               f"# or: {feed[2:]}")
    return fix, snippet


def experiments(finding: Finding, cuda: bool) -> tuple[list[Experiment], str | None]:
    """The replay (the bound if input were free), and the experiment of the fix `fix` recommends: the workers
    kept alive when restarts are most of the wait; else the suggested workers (and pinned memory on CUDA) while
    the loader has fewer or does not pin. A cheaper sample (gpufeed pack and Feed) has no experiment: the
    reason says so, and the finding's measured gain is then None with the bound beside it."""
    # the changes patch torch: imported when --try plans them, so that drawing a page does not load torch
    from gpufeed.doctor.experiments import REPLAY_BATCHES, Experiment, loader_experiment, replay, replayed

    evidence = finding.evidence
    found = [Experiment(KIND, "replay", f"replayed the first {REPLAY_BATCHES} batches from memory instead of the "
                        "DataLoader (the bound if input were free)", replay, min_warmup=REPLAY_BATCHES,
                        check=replayed, role="bound")]
    workers = evidence.get("suggested_workers") or min(os.cpu_count() or 1, MAX_SUGGESTED_WORKERS)
    current = evidence.get("loader_workers")
    restarts = evidence.get("restart_share_of_wait") or 0.0
    if current and restarts >= RESTART_SHARE:
        found.append(loader_experiment(KIND, "persistent_workers", workers=current))
        return found, None
    more = current is None or current < workers
    pin = cuda and evidence.get("pin_memory") is not True
    if more or pin:
        found.append(loader_experiment(KIND, "workers", workers=workers if more else None, pin_memory=pin))
        return found, None
    return found, (f"the fix recommended (a cheaper sample: gpufeed pack and gpufeed.Feed) has no experiment: "
                   f"the loader already has {current} workers (suggested {workers}), so only the bound if input "
                   f"were free is measured")
