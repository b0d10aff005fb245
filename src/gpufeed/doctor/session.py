"""The doctor as a library call: `run(script, *args, ...)` runs a training script watched and returns the Report
that `gpufeed doctor` prints, in this process or as a torchrun job of several ranks, with `--try`'s measured
fixes when asked. The command line parses its flags into the same values (doctor/runs/script.py) and calls the
same functions; it only prints, writes and says the exit status.

- `doctor_script`: one process: watch the script, diagnose, and with `try_fixes` run the experiments' pairs
  (trials/runs.py); a `Session` with the report and what the terminal shows besides it.
- `doctor_ranks`: `nproc_per_node` ranks through torch.distributed.run (ranks/job.py); rank 0 writes the report,
  read back here; with `try_fixes`, each run of the script its own job.
- `run`: either, by `nproc_per_node`; the Report.

    import gpufeed.doctor
    report = gpufeed.doctor.run("train.py", "--epochs", "1", steps=30)
    report.verdict.primary, [f.kind for f in report.findings]  # ("input_bound", ["input_bound", ...])
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufeed.doctor.findings import invariants
from gpufeed.doctor.findings.diagnose import diagnose, empty_report
from gpufeed.doctor.findings.report import Report
from gpufeed.doctor.notes import Note
from gpufeed.doctor.runs.script import DEFAULT_SETTINGS, Script, WatchSettings
from gpufeed.doctor.trials.plan import plan_experiments
from gpufeed.doctor.trials.runs import REPEATS, run_experiments, run_once, with_trials


@dataclass(frozen=True)
class Session:
    """One process's doctor run: the report (an empty one, its notes saying why, when no step was watched), and
    what the terminal shows besides it: whether steps were watched, the watch's problem and its note, the notes of
    a run without a report, where the batch size came from, and whether the run failed (exit status 1)."""

    report: Report
    watched: bool
    problem: str | None
    incomplete: Note | None
    notes: tuple[Note, ...]
    batch_from_loader: bool
    failed: bool


def doctor_script(script: Script, settings: WatchSettings = DEFAULT_SETTINGS, try_fixes: bool = False,
                  repeats: int = REPEATS, on_plan: Callable[[list], None] | None = None) -> Session:
    """Run `script` in this process watched, diagnose it, and with `try_fixes` measure the leading fixes
    (`on_plan(experiments)` is told the plan before their runs). Raises GpufeedError when the script is not there."""
    from gpufeed.doctor.observe.inject import check_target, run_script
    from gpufeed.doctor.observe.watch import Watcher

    check_target(script.target, script.is_module)
    watcher = Watcher(steps=settings.steps, warmup=settings.warmup, profile_steps=settings.profile_steps)
    outcome = run_script(script.target, list(script.args), script.is_module, watcher, timeout_s=settings.timeout_s)
    problem = outcome.problem
    incomplete = Note("run", f"watch incomplete: {problem}") if problem and outcome.error is None else None
    notes = [incomplete] if incomplete else []
    records = watcher.records
    report = diagnose(watcher.observe(outcome.error, notes)) if records else None
    if try_fixes and report is not None and outcome.error is None and not outcome.timed_out:
        report = measured_fixes(script, settings, report, repeats, on_plan)
    elif try_fixes:
        why = ("the script raised; fix that first" if outcome.error is not None else
               "no watched step to compare with" if report is None else "the first run stalled")
        notes.append(Note("unmeasured", f"verified fixes (--try): not tried, {why}"))
        if report is not None:
            report = dataclasses.replace(report, notes=report.notes + notes[-1:])
    watched = report is not None
    if report is None:
        report = empty_report(watcher.observe(outcome.error, notes))
    return Session(report, watched, problem, incomplete, tuple(notes), bool(watcher.seen.get("batches")),
                   outcome.error is not None or outcome.timed_out or not records)


def measured_fixes(script: Script, settings: WatchSettings, report: Report, repeats: int = REPEATS,
                   on_plan: Callable[[list], None] | None = None, runner=None) -> Report:
    """The report with the measured gains of its experiments and the reasons for the rest (`--try`); `runner`
    runs the script once (doctor/runs/runner.py; default: this process)."""
    if on_plan is not None:
        on_plan(plan_experiments(report)[0])
    findings, notes = run_experiments(script, report, settings, repeats, runner or run_once)
    return invariants.checked(dataclasses.replace(report, findings=findings, notes=report.notes + notes))


@dataclass(frozen=True)
class RanksSession:
    """A torchrun job's doctor run: rank 0's report (None when it wrote none), the notes --try added to it, and
    the ranks whose process failed (the first job's)."""

    report: Report | None
    tried_notes: tuple[Note, ...] = ()
    failed_ranks: tuple[int, ...] = ()


def doctor_ranks(script: Script, settings: WatchSettings, nproc_per_node: int, try_fixes: bool = False,
                 repeats: int = REPEATS, output_words: tuple[str, ...] = (),
                 on_plan: Callable[[list], None] | None = None) -> RanksSession:
    """The doctor on `nproc_per_node` ranks of a torchrun job on this machine: rank 0's report (rank 0 prints it,
    and writes `output_words`' --json/--html), with `try_fixes` (when the first job succeeded) each experiment's
    pairs as jobs of their own."""
    from gpufeed.doctor.ranks.job import RankJob, diagnosis_job, trial_jobs

    job = RankJob(script, settings, nproc_per_node, output_words)
    with tempfile.TemporaryDirectory(prefix="gpufeed-doctor-") as folder:
        report, failed = diagnosis_job(job, Path(folder))
        if report is None or failed or not try_fixes:
            return RanksSession(report, (), tuple(failed))
        planned, unmeasured = plan_experiments(report)
        if on_plan is not None:
            on_plan(planned)
        trials = trial_jobs(job, report, planned, Path(folder), repeats)
    findings, notes = with_trials(report, trials, unmeasured)
    report = invariants.checked(dataclasses.replace(report, findings=findings, notes=report.notes + notes))
    return RanksSession(report, tuple(notes))


def run(script: str, *script_args: str, module: bool = False, steps: int = 50, warmup: int = 5,
        profile_steps: int = 5, timeout_s: float = 60.0, try_fixes: bool = False, repeats: int = REPEATS,
        nproc_per_node: int | None = None) -> Report:
    """Doctor `script` (a file, or with `module` a module run as `python -m`) with its own `script_args`: watch
    `steps` steps after `warmup`, profile `profile_steps` more, stop after `timeout_s` without a step; with
    `try_fixes`, measure the leading fixes in `repeats` pairs each; with `nproc_per_node` > 1, as that many ranks
    through torchrun. The Report that `gpufeed doctor` prints. Raises RunFailed when a ranks job failed before its
    report."""
    from gpufeed.errors import RunFailed

    target = Script(script, tuple(script_args), module)
    settings = WatchSettings(steps, warmup, profile_steps, timeout_s)
    if nproc_per_node is not None and nproc_per_node > 1:
        report = doctor_ranks(target, settings, nproc_per_node, try_fixes, repeats).report
        if report is None:
            raise RunFailed(f"the doctor's job of {nproc_per_node} ranks failed before rank 0 wrote its report; "
                            f"run `gpufeed doctor --nproc-per-node {nproc_per_node} {target.named()}` to see why")
        return report
    return doctor_script(target, settings, try_fixes, repeats).report
