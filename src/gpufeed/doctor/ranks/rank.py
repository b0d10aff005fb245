"""One rank of the doctor's torchrun job, as a library call: watch the script, send this rank's record, and on
rank 0 gather every rank's record into the job's report (job.py's `job_report`). The command line gives what only
it does: `publish`, which shows and writes rank 0's report, and `end_process`, which ends a rank at once when the
guard abandons it (context.py's RankGuard: a rank that crashed or hangs must not keep the others waiting).

In a `--try` job (TRIAL_VARIABLE set by the launcher, job.py), each rank installs the experiment it was told, checks
that it took, and rank 0 writes its watched steps and the first problem of any rank for the launcher to compare."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpufeed.doctor.ranks.context import GRACE_S, Exchange, RankContext, RankGuard, rank_record
from gpufeed.doctor.ranks.job import (
    JobReport,
    end_process_group,
    job_report,
    other_problems,
    save_for_launcher,
    trial_experiment,
    trial_from_environment,
    write_trial_result,
)
from gpufeed.doctor.ranks.timing import RankTimer
from gpufeed.doctor.runs.script import Script, WatchSettings


@dataclass(frozen=True)
class RankRun:
    """What a rank's run gives its caller: the exit status, the job's report on rank 0 (None elsewhere, and in a
    --try job), rank 0's own problem, and whether this is a --try job's run."""

    status: int
    job: JobReport | None
    problem: str | None
    trial: bool


def run_rank(script: Script, settings: WatchSettings, context: RankContext,
             publish: Callable[[JobReport, str | None], None], end_process: Callable[[int], None]) -> RankRun:
    """Run this rank: watched, its record sent; rank 0 gathers, diagnoses and calls `publish(job, problem)` (also
    when the guard abandons the job, before `end_process(1)`); the others wait until rank 0 is done."""
    from gpufeed.doctor.observe.inject import run_script
    from gpufeed.doctor.observe.watch import Watcher
    from gpufeed.doctor.trials.changes import Changes

    trial = trial_from_environment()
    experiment, changes = trial_experiment(trial), Changes()
    watcher = Watcher(steps=settings.steps, warmup=settings.warmup, profile_steps=settings.profile_steps)
    exchange = Exchange(context, timeout_s=settings.timeout_s)
    timer = RankTimer()

    def record(problem: str | None) -> dict:
        return rank_record(context.rank, watcher.records, watcher.started_s, timer, problem, watcher.device or "cpu")

    def abandon(reason: str) -> None:  # on the guard's thread; ends the process
        exchange.publish(record(reason))
        exchange.fail(context.rank, reason)
        if context.is_main:
            _gather(context, settings, exchange, watcher, reason, None, trial, publish)
        else:
            exchange.wait_finished(settings.timeout_s)
        end_process(1)

    guard = RankGuard(context, exchange, lambda: watcher.boundaries, settings.timeout_s + GRACE_S, abandon,
                      lambda: end_process(1))
    timer.install()
    guard.start()
    try:
        if experiment is not None:
            experiment.install(changes)
        outcome = run_script(script.target, list(script.args), script.is_module, watcher,
                             timeout_s=settings.timeout_s)
    finally:
        changes.restore()
        timer.remove()
    if not guard.claim():
        threading.Event().wait()  # the guard is ending this rank (within ABANDON_LIMIT_S)
    problem = outcome.problem or (experiment.check(watcher, changes, []) if experiment is not None else None)
    exchange.publish(record(problem))
    if problem:
        exchange.fail(context.rank, problem)
    job = None
    if context.is_main:
        status, job = _gather(context, settings, exchange, watcher, problem, outcome.error, trial, publish)
    else:
        exchange.wait_finished(settings.timeout_s)
        status = 1 if problem else 0
    end_process_group()
    return RankRun(status, job, problem, trial is not None)


def _gather(context, settings, exchange, watcher, problem: str | None, error: str | None, trial: dict | None,
            publish) -> tuple[int, JobReport | None]:
    """Rank 0: gather every rank's record, diagnose, publish; then tell the ranks it is done. In a --try job,
    write only rank 0's watched steps and the first problem of any rank (TRIAL_VARIABLE's result)."""
    try:
        records, missing = exchange.gather(settings.timeout_s)
        others = other_problems(records, missing)
        if trial is not None:
            first = problem or (others[0] if others else None)
            write_trial_result(trial, watcher, first)
            return (1 if first else 0), None
        job = job_report(watcher, context.world_size, records, missing, problem, error)
        publish(job, problem)
        save_for_launcher(job.report)
    finally:
        exchange.finish()
    return (1 if problem or others or not job.watched else 0), job
