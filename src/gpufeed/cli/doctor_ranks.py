"""`gpufeed doctor` on several ranks: `--nproc-per-node N` launches the ranks through torch.distributed.run, and
each rank (found from torchrun's environment) runs the script watched, sends its record, and rank 0 prints and
writes the one report (doctor/ranks/context.py says how; doctor/ranks/job.py holds the jobs' protocol). Ranks other
than 0 print nothing of the doctor's. With --try: cli/doctor_ranks_try.py. The printing is cli/doctor_show.py's."""

from __future__ import annotations

import os
import sys
import threading

from gpufeed.cli.doctor_show import show, show_ranks
from gpufeed.cli.output import check_output_paths, emit_document, error_console
from gpufeed.errors import GpufeedError


def launch(args) -> int:
    """Run the doctor as args.nproc_per_node ranks on this machine through torch's own launcher; with --try,
    then each experiment's runs, each its own job."""
    from gpufeed.doctor.observe.inject import check_target
    from gpufeed.doctor.ranks.job import rank_words, run_job

    if not args.command:
        raise GpufeedError("give the training script: gpufeed doctor --nproc-per-node N SCRIPT [ARGS...]")
    check_target(args.command[0], args.module)
    check_output_paths(args, inputs=() if args.module else (args.command[0],))
    error_console.print(f"gpufeed doctor: {args.nproc_per_node} ranks through torch.distributed.run "
                        f"(--standalone); rank 0 writes the report")
    if args.try_fixes:
        from gpufeed.cli.doctor_ranks_try import launch_with_try

        return launch_with_try(args)
    failed = run_job(rank_words(args), args.nproc_per_node)
    if failed:
        error_console.print(f"gpufeed doctor: the job failed on rank {', '.join(map(str, failed))} (exit status "
                            f"not 0); the report above names the rank and its error")
        return 1
    return 0


def run_rank(args, context) -> int:
    """One rank of a torchrun job: watch the script, send the record; rank 0 gathers and reports."""
    from gpufeed.doctor.observe.inject import check_target, run_script
    from gpufeed.doctor.observe.watch import Watcher
    from gpufeed.doctor.ranks.context import GRACE_S, Exchange, RankGuard, rank_record
    from gpufeed.doctor.ranks.job import end_process_group, trial_experiment, trial_from_environment
    from gpufeed.doctor.ranks.timing import RankTimer
    from gpufeed.doctor.trials.changes import Changes

    if not args.command:
        raise GpufeedError("give the training script: torchrun ... -m gpufeed doctor SCRIPT [ARGS...]")
    if args.try_fixes:
        raise GpufeedError("--try runs each run of the script as its own job: use gpufeed doctor --nproc-per-node N "
                           "--try SCRIPT instead of torchrun")
    trial = trial_from_environment()
    experiment, changes = trial_experiment(trial), Changes()
    target, script_args = args.command[0], args.command[1:]
    check_target(target, args.module)
    if context.is_main and trial is None:
        check_output_paths(args, inputs=() if args.module else (target,))
        error_console.print(f"gpufeed doctor: rank 0 of {context.world_size}: running {'-m ' if args.module else ''}"
                            f"{target}; watching {args.steps} steps after {args.warmup} warm-up steps on every rank; "
                            f"stopping after {args.timeout:g} s without a step")
    watcher = Watcher(steps=args.steps, warmup=args.warmup, profile_steps=args.profile_steps)
    exchange = Exchange(context, timeout_s=args.timeout)
    timer = RankTimer()

    def record(problem: str | None) -> dict:
        return rank_record(context.rank, watcher.records, watcher.started_s, timer, problem, watcher.device or "cpu")

    def abandon(reason: str) -> None:  # on the guard's thread; ends the process
        exchange.publish(record(reason))
        exchange.fail(context.rank, reason)
        if context.is_main:
            _report(args, context, exchange, watcher, reason, None, trial)
        else:
            exchange.wait_finished(args.timeout)
        exit_now(1)

    guard = RankGuard(context, exchange, lambda: watcher.boundaries, args.timeout + GRACE_S, abandon,
                      lambda: exit_now(1))
    timer.install()
    guard.start()
    try:
        if experiment is not None:
            experiment.install(changes)
        outcome = run_script(target, script_args, args.module, watcher, timeout_s=args.timeout)
    finally:
        changes.restore()
        timer.remove()
    if not guard.claim():
        threading.Event().wait()  # the guard is ending this rank (within ABANDON_LIMIT_S)
    problem = outcome.problem or (experiment.check(watcher, changes, []) if experiment is not None else None)
    exchange.publish(record(problem))
    if problem:
        exchange.fail(context.rank, problem)
    if context.is_main:
        status = _report(args, context, exchange, watcher, problem, outcome.error, trial)
    else:
        exchange.wait_finished(args.timeout)
        status = 1 if problem else 0
    end_process_group()
    return status


def _report(args, context, exchange, watcher, problem: str | None, error: str | None, trial: dict | None) -> int:
    """Rank 0: gather every rank's record, diagnose, print, write; then tell the ranks it is done. In a --try
    job, write only rank 0's watched steps and the first problem of any rank (TRIAL_VARIABLE's result)."""
    from gpufeed.doctor.ranks.job import job_report, other_problems, save_for_launcher, write_trial_result

    try:
        records, missing = exchange.gather(args.timeout)
        others = other_problems(records, missing)
        if trial is not None:
            first = problem or (others[0] if others else None)
            write_trial_result(trial, watcher, first)
            return 1 if first else 0
        job = job_report(watcher, context.world_size, records, missing, problem, error)
        if args.json != "-":
            show(job.report if job.watched else None, watcher, problem, list(job.notes), shown=job.incomplete)
            show_ranks(job.report)
        emit_document(job.report.to_json(), "doctor", args)
        save_for_launcher(job.report)
    finally:
        exchange.finish()
    return 1 if problem or others or not job.watched else 0


def exit_now(status: int) -> None:
    """Flush and end the process at once (no interpreter shutdown: the main thread may be blocked in C, inside a
    collective that a failed rank will never join)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(status)
