"""The plan of `--try`: which experiments test each finding's fix, and which of them run.

Each kind declares its experiments (findings/kind.py: `Kind.experiments(finding, cuda)`, reading the numbers its
detection measured), as data (findings/experiments.py: `Replay`, `LoaderChange`, `Autocast`, `DdpChange`,
`AsyncItem`, `CutPadding`), with the reason none or no more are tried; a kind that declares none has none
(`NO_EXPERIMENT`): no change made from outside the script tests its fix. `experiments_for` builds each declaration
into the change it installs (changes.py, async_item.py, cut_padding.py) by the declaration's type (`BUILDERS`),
never by the kind's name.

`plan_experiments` takes them for the report's findings of severity high or medium, in the report's order,
MAX_EXPERIMENTS at most; the rest, and the kinds or devices where no change can act, are notes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpufeed.doctor.findings.experiments import AsyncItem, Autocast, CutPadding, DdpChange, LoaderChange, Replay
from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Finding, Report
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
from gpufeed.doctor.trials.cut_padding import CUT_PADDING

# gpufeed's choice: three experiments, each 2 x runs.REPEATS runs, keep --try to minutes for a typical script.
MAX_EXPERIMENTS = 3
LEADING = ("high", "medium")

Choice = tuple[list[Experiment], str | None]


def _replay(kind: str, declared: Replay) -> Experiment:
    return Experiment(kind, declared.name, f"replayed the first {REPLAY_BATCHES} batches from memory instead of the "
                      "DataLoader (the bound if input were free)", replay, min_warmup=REPLAY_BATCHES, check=replayed,
                      role="bound")


def _loader(kind: str, declared: LoaderChange) -> Experiment:
    return loader_experiment(kind, declared.name, workers=declared.workers, pin_memory=declared.pin_memory,
                             batch_factor=declared.batch_factor, path=declared.path)


def _autocast(kind: str, declared: Autocast) -> Experiment:
    return Experiment(kind, declared.name, f"the outermost forward under torch.autocast('{declared.device_type}', "
                      f"dtype=torch.bfloat16){declared.path}",
                      lambda changes: autocast_forward(changes, declared.device_type))


def _ddp(kind: str, declared: DdpChange) -> Experiment:
    return ddp_experiment(kind, declared.name, gradient_as_bucket_view=declared.gradient_as_bucket_view,
                          fp16_compress=declared.fp16_compress)


def _async_item(kind: str, declared: AsyncItem) -> Experiment:
    return dataclasses.replace(ASYNC_ITEM, kind=kind, name=declared.name)


def _cut_padding(kind: str, declared: CutPadding) -> Experiment:
    return dataclasses.replace(CUT_PADDING, kind=kind, name=declared.name)


# each declaration's type -> the experiment that makes its change (given the finding's kind, which it tests)
BUILDERS: dict[type, Callable[[str, object], Experiment]] = {
    Replay: _replay, LoaderChange: _loader, Autocast: _autocast, DdpChange: _ddp, AsyncItem: _async_item,
    CutPadding: _cut_padding}


def experiments_for(finding: Finding, cuda: bool) -> Choice:
    """The experiments that test `finding`'s fix on this device, and why none or no more are tried."""
    declared, reason = KINDS[finding.kind].experiments(finding, cuda)
    return [BUILDERS[type(each)](finding.kind, each) for each in declared], reason


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
