"""Verified fixes (`gpufeed doctor --try`): re-run the user's own loop with one change and measure what it gains.

Each experiment runs the script again in this process (`run_script`: the same argv, working directory and step
clock) with one change installed around the doctor's instrumentation, watches `steps` steps after `warmup`, and
compares its rate with the baseline run's: samples/s = sum of batch sizes / sum of wall time over the watched steps
(steps/s when a batch size was not read in either run; the ratio is the same while the batch is). The gain is new
rate / baseline rate, both measured in this process, with the number of steps behind each.

The experiments, for the findings of severity high or medium, in the report's order, MAX_EXPERIMENTS at most:
- input_bound: "replay": the DataLoader iterator's `__next__` serves its first REPLAY_BATCHES batches again, in a
  cycle, so the model runs as if input were free (the upper bound of any input fix, like a synthetic-data run);
  "workers": `DataLoader.__init__` gets num_workers=min(cores, 8) (the finding's suggestion), persistent_workers
  and, on CUDA, pin_memory.
- host_to_device (CUDA, pageable copies): pin_memory=True.
- small_batch: the DataLoader's batch_size doubled. This changes the optimisation (learning rate, steps per
  epoch): the gain is in samples/s only, a measurement and not a drop-in fix.
- precision, float32 on CUDA: the outermost forward under bf16 autocast (a global forward pre-hook enters
  `torch.autocast`, the post-hook leaves it); the loss outside the forward stays as it was.
Not tried, with the reason in `unmeasured`: sync_stall and float64 precision (each needs an edit of the script),
every experiment on a device where it cannot act, and every other kind (no experiment).

Limits: one run per experiment, no repeats, so a ratio carries the run-to-run noise of its steps. The changes
reach every DataLoader and every module in the process (a validation loader too). Replayed batches are the very
objects the loader made (no copy, so no cost per step): a script that changes its batch in place sees that change
again. A failing experiment (the script raises, stalls or ignores the change) is a line in `unmeasured`, never an
exception.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import statistics
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from gpufeed.doctor.inject import _Patch, describe_exception, run_script
from gpufeed.doctor.report import Finding, Gain, Report
from gpufeed.doctor.watch import Watcher
from gpufeed.measure.steps import StepRecord

# gpufeed's choice: three re-runs of a small script take well under a minute.
MAX_EXPERIMENTS = 3
# gpufeed's choice: eight batches to cycle through, as an epoch-free stand-in for the loader's output.
REPLAY_BATCHES = 8
# the same cap as rules.MAX_SUGGESTED_WORKERS, used when a finding carries no suggestion
MAX_WORKERS = 8
LEADING = ("high", "medium")


class Changes:
    """Patches and hook handles installed for one experiment; `restore()` undoes them, last first. `counts`:
    what the changes did (replayed batches, say), for the experiment's check."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self.patches: list[_Patch] = []
        self.handles: list = []
        self.cleanups: list[Callable[[], None]] = []

    def restore(self) -> None:
        for handle in self.handles:
            handle.remove()
        for patch in reversed(self.patches):
            patch.restore()
        for cleanup in self.cleanups:
            cleanup()
        self.patches, self.handles, self.cleanups = [], [], []


@dataclass(frozen=True)
class Experiment:
    kind: str  # the finding it tests
    name: str  # "replay", "workers", "pin_memory", "double_batch", "bf16_autocast"
    description: str  # what was changed, in words: the start of Gain.how
    install: Callable[[Changes], None]
    min_warmup: int = 0  # warm-up steps the change needs (replay: the batches it caches)
    # why the change did not take (given the run's watcher, the changes, the baseline's records), or None
    check: Callable[[Watcher, Changes, list[StepRecord]], str | None] = lambda watcher, changes, baseline: None


@dataclass(frozen=True)
class Trial:
    """One experiment's run: the gain, or why there is none."""

    experiment: Experiment
    gain: Gain | None
    steps: int  # watched steps behind the new rate
    rate: float | None  # in `unit`
    baseline_rate: float | None
    unit: str  # "samples/s" or "steps/s"
    problem: str | None = None


@dataclass
class _ReplayState:
    batches: list = field(default_factory=list)
    served: int = 0
    exhausted: bool = False


def replay(changes: Changes, batches: int = REPLAY_BATCHES) -> None:
    """Every DataLoader iterator yields its first `batches` batches, then serves them again in a cycle."""
    from torch.utils.data import dataloader

    states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def make_next(original):
        def __next__(iterator):
            state = states.setdefault(iterator, _ReplayState())
            if len(state.batches) < batches and not state.exhausted:
                try:
                    batch = original(iterator)
                except StopIteration:
                    if not state.batches:
                        raise
                    state.exhausted = True  # a loader shorter than `batches`: cycle what it gave
                else:
                    state.batches.append(batch)
                    return batch
            batch = state.batches[state.served % len(state.batches)]
            state.served += 1
            changes.counts["replayed batches"] += 1
            return batch
        return __next__

    changes.patches.append(_Patch(dataloader._BaseDataLoaderIter, "__next__", make_next))


def loader_arguments(changes: Changes, change: Callable[[dict], None]) -> None:
    """`DataLoader.__init__` runs with its bound arguments (defaults left out) passed through `change` first."""
    from torch.utils.data import DataLoader

    def make_init(original):
        signature = inspect.signature(original)

        def __init__(loader, *args, **kwargs):
            bound = signature.bind(loader, *args, **kwargs)
            change(bound.arguments)
            original(*bound.args, **bound.kwargs)
        return __init__

    changes.patches.append(_Patch(DataLoader, "__init__", make_init))


def autocast_forward(changes: Changes, device_type: str, dtype: torch.dtype = torch.bfloat16) -> None:
    """The outermost module forward runs under `torch.autocast(device_type, dtype)`."""
    state: dict = {"depth": 0, "context": None}

    def leave() -> None:
        if state["context"] is not None:
            state["context"].__exit__(None, None, None)
        state["depth"], state["context"] = 0, None

    def pre(module, inputs) -> None:
        state["depth"] += 1
        if state["depth"] == 1:
            state["context"] = torch.autocast(device_type, dtype=dtype)
            state["context"].__enter__()

    def post(module, inputs, output) -> None:
        state["depth"] = max(0, state["depth"] - 1)
        if state["depth"] == 0:
            leave()

    changes.handles += [register_module_forward_pre_hook(pre), register_module_forward_hook(post, always_call=True)]
    changes.cleanups.append(leave)  # a run stopped inside a forward (the doctor's stop skips the post-hook)


# --- which experiments ------------------------------------------------------------------------------------------


def typical_batch(records: list[StepRecord]) -> int | None:
    sizes = [record.batch_size for record in records if record.batch_size is not None]
    return int(statistics.median_low(sizes)) if sizes else None


def loader_experiment(kind: str, name: str, *, workers: int | None = None, pin_memory: bool = False,
                      batch_factor: int = 1) -> Experiment:
    """Every DataLoader built with `workers` workers (and persistent_workers), pinned memory, a `batch_factor`
    times larger batch_size: whichever are given."""
    settings = ([f"num_workers={workers}", "persistent_workers=True"] if workers else []) + (
        ["pin_memory=True"] if pin_memory else [])
    description = f"DataLoader({', '.join(settings)})" if settings else "DataLoader as it was"
    if batch_factor != 1:
        description = (f"DataLoader batch_size x{batch_factor} (this changes the optimisation: learning rate, "
                       f"steps per epoch)")

    def change(arguments: dict) -> None:
        if workers:
            arguments["num_workers"], arguments["persistent_workers"] = workers, True
        if pin_memory:
            arguments["pin_memory"] = True
        batch = arguments.get("batch_size", 1)
        if batch_factor != 1 and isinstance(batch, int) and arguments.get("batch_sampler") is None:
            arguments["batch_size"] = batch * batch_factor

    def check(watcher: Watcher, changes: Changes, baseline: list[StepRecord]) -> str | None:
        if workers and watcher.loader_workers != workers:
            return f"the loader ran with {watcher.loader_workers} workers, not {workers}: it is not a torch " \
                   f"DataLoader built while the script ran"
        if pin_memory and watcher.loader_pin_memory is not True:
            return "the loader did not pin memory: it is not a torch DataLoader built while the script ran"
        old, new = typical_batch(baseline), typical_batch(watcher.records)
        if batch_factor != 1 and (old is None or new is None):
            return "no DataLoader batch size was read: the batches do not come from a DataLoader's batch_size"
        if batch_factor != 1 and new == old:
            return f"the batch size stayed {new}: the batches do not come from a DataLoader's batch_size"
        return None

    return Experiment(kind, name, description, lambda changes: loader_arguments(changes, change), check=check)


def replayed(watcher: Watcher, changes: Changes, baseline: list[StepRecord]) -> str | None:
    if changes.counts["replayed batches"] == 0:
        return "no DataLoader batch was replayed: the loop does not draw its batches from a torch DataLoader"
    return None


def experiments_for(finding: Finding, cuda: bool) -> tuple[list[Experiment], str | None]:
    """The experiments that test `finding`'s fix, and why (others) are not tried."""
    evidence = finding.evidence
    if finding.kind == "input_bound":
        found = [Experiment("input_bound", "replay", f"replayed the first {REPLAY_BATCHES} batches from memory "
                            "instead of the DataLoader (the bound if input were free)", replay,
                            min_warmup=REPLAY_BATCHES, check=replayed)]
        workers = evidence.get("suggested_workers") or min(os.cpu_count() or 1, MAX_WORKERS)
        current = evidence.get("loader_workers")
        more = current is None or current < workers
        pin = cuda and evidence.get("pin_memory") is not True
        if more or pin:
            found.append(loader_experiment("input_bound", "workers", workers=workers if more else None,
                                           pin_memory=pin))
            return found, None
        return found, f"more DataLoader workers: not tried, the loader already has {current} (suggested {workers})"
    if finding.kind == "host_to_device":
        if cuda and evidence.get("pin_memory") is not True:
            return [loader_experiment("host_to_device", "pin_memory", pin_memory=True)], None
        return [], "not tried: the loader already pins memory, or the device is not CUDA"
    if finding.kind == "small_batch":
        return [loader_experiment("small_batch", "double_batch", batch_factor=2)], None
    if finding.kind == "precision" and "autocast_seen" in evidence:
        if not cuda:
            return [], "bf16 autocast: not tried, the device is the CPU"
        return [Experiment("precision", "bf16_autocast", "the outermost forward under "
                           "torch.autocast('cuda', dtype=torch.bfloat16)",
                           lambda changes: autocast_forward(changes, "cuda"))], None
    if finding.kind == "precision":
        return [], "not tried: float64 to float32 needs the model and its data cast in the script"
    if finding.kind == "sync_stall":
        return [], "not tried: removing a per-step .item(), .cpu() or print of a device tensor needs a change to " \
                   "the script"
    return [], "not tried: no experiment for this kind of finding"


def plan_experiments(report: Report) -> tuple[list[Experiment], list[str]]:
    """The experiments for the report's high and medium findings, in its order (MAX_EXPERIMENTS at most), and a
    line for each finding or experiment left out."""
    cuda = report.verdict.device.startswith("cuda")
    planned, unmeasured = [], []
    leading = [finding for finding in report.findings if finding.severity in LEADING]
    if not leading:
        return [], ["verified fixes (--try): none tried, no finding of high or medium severity"]
    for finding in leading:
        found, reason = experiments_for(finding, cuda)
        if reason:
            unmeasured.append(f"verified fix for {finding.kind}: {reason}")
        for experiment in found:
            if len(planned) < MAX_EXPERIMENTS:
                planned.append(experiment)
            else:
                unmeasured.append(f"verified fix for {finding.kind} ({experiment.name}): not tried, --try runs "
                                  f"{MAX_EXPERIMENTS} experiments at most")
    return planned, unmeasured


# --- running and comparing ----------------------------------------------------------------------------------


def _rate_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def compare(experiment: Experiment, records: list[StepRecord], baseline: list[StepRecord]) -> Trial:
    """The new rate over the baseline's: samples/s when every step of both runs has a batch size, else steps/s."""
    samples = all(record.batch_size is not None for record in records + baseline)
    unit = "samples/s" if samples else "steps/s"

    def rate(steps: list[StepRecord]) -> float:
        amount = sum(record.batch_size for record in steps) if samples else len(steps)
        return amount / sum(record.wall_s for record in steps)

    new, old = rate(records), rate(baseline)
    if experiment.name == "double_batch" and not samples:
        return Trial(experiment, None, len(records), None, None, unit,
                     "the batch size was not read, so samples/s cannot be compared")
    steps = f"{len(records)} steps" + ("" if len(records) == len(baseline) else f" (baseline {len(baseline)})")
    how = f"{experiment.description}: {steps}, {_rate_text(new)} vs {_rate_text(old)} {unit}"
    return Trial(experiment, Gain(new / old, how), len(records), new, old, unit)


def run_trial(experiment: Experiment, target: str, args: list[str], is_module: bool,
              baseline_records: list[StepRecord], steps: int, warmup: int, timeout_s: float = 60.0) -> Trial:
    """Run the script once with `experiment`'s change and compare with the baseline; every patch is restored and
    a failure is the Trial's `problem`, never an exception (a KeyboardInterrupt passes through)."""
    watcher = Watcher(steps=steps, warmup=max(warmup, experiment.min_warmup))
    changes = Changes()
    try:
        try:
            experiment.install(changes)
            outcome = run_script(target, list(args), is_module, watcher, timeout_s=timeout_s)
        finally:
            changes.restore()
        records = watcher.records
        problem = outcome.problem if outcome.error is not None or outcome.timed_out or not records else None
        problem = problem or experiment.check(watcher, changes, baseline_records)
        if problem is None:
            return compare(experiment, records, baseline_records)
    except Exception as error:  # our change or the comparison broke: a line in the report, not a crash
        problem = f"the experiment failed: {describe_exception(error)}"
    return Trial(experiment, None, 0, None, None, "samples/s", problem)


def combined_gain(trials: list[Trial]) -> Gain:
    """The first trial's factor; `how` lists every trial, each after the first with its own factor."""
    first, *others = trials
    how = "; ".join([first.gain.how] + [f"{trial.gain.how} ({trial.gain.measured:.2f}x)" for trial in others])
    return Gain(first.gain.measured, how)


def run_experiments(target: str, args: list[str], is_module: bool, baseline: Report,
                    baseline_records: list[StepRecord], steps: int, warmup: int,
                    timeout_s: float = 60.0) -> tuple[list[Finding], list[str]]:
    """The baseline's findings, copies with `gain` set where an experiment measured one, and what was not
    measured and why. `steps` and `warmup` are per experiment run; see the module docstring for the runs."""
    planned, unmeasured = plan_experiments(baseline)
    if planned and not baseline_records:
        return list(baseline.findings), unmeasured + ["verified fixes (--try): no baseline step to compare with"]
    trials = [run_trial(experiment, target, args, is_module, baseline_records, steps, warmup, timeout_s)
              for experiment in planned]
    findings = []
    for finding in baseline.findings:
        own = [trial for trial in trials if trial.experiment.kind == finding.kind]
        unmeasured += [f"verified fix for {finding.kind} ({trial.experiment.name}): {trial.problem}"
                       for trial in own if trial.gain is None]
        measured = [trial for trial in own if trial.gain is not None]
        findings.append(dataclasses.replace(finding, gain=combined_gain(measured)) if measured else finding)
    return findings, unmeasured
