"""`gpufeed doctor` on several ranks: `--nproc-per-node N` launches the ranks through torch.distributed.run, and
each rank (found from torchrun's environment) runs the script watched, sends its record, and rank 0 prints and
writes the one report (gpufeed/doctor/ranks.py says how). Ranks other than 0 print nothing of the doctor's.
With --try: cli/doctor_ranks_try.py."""

from __future__ import annotations

import os
import sys
import threading

from gpufeed.cli.output import check_output_paths, console, emit_document, error_console
from gpufeed.errors import GpufeedError


def rank_words(args, steps: int | None = None, warmup: int | None = None, trial: bool = False) -> list[str]:
    """The doctor's options and SCRIPT ARGS for each rank (--nproc-per-node and --try left out); a `trial` run
    profiles nothing and writes no --json or --html (the launcher writes the report)."""
    words = ["--steps", str(steps or args.steps), "--warmup", str(args.warmup if warmup is None else warmup),
             "--profile-steps", "0" if trial else str(args.profile_steps), "--timeout", f"{args.timeout:g}"]
    for flag in ("json", "html"):
        if getattr(args, flag) is not None and not trial:
            words += [f"--{flag}", getattr(args, flag)]
    if args.module:
        words.append("-m")
    return words + list(args.command)


def run_job(words: list[str], nproc: int) -> list[int]:
    """One torchrun job of `nproc` ranks running `gpufeed doctor WORDS`; the ranks that failed (none: [])."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as run_ranks

    from gpufeed.doctor.ranks import launcher_arguments

    try:
        run_ranks(parse_args(launcher_arguments(words, nproc)))
    except ChildFailedError as failed:
        return sorted(failed.failures)
    return []


def launch(args) -> int:
    """Run the doctor as args.nproc_per_node ranks on this machine through torch's own launcher; with --try,
    then each experiment's runs, each its own job."""
    from gpufeed.doctor.inject import check_target

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
    from gpufeed.cli.doctor_ranks_try import trial_experiment, trial_from_environment
    from gpufeed.doctor.experiments import Changes
    from gpufeed.doctor.inject import check_target, run_script
    from gpufeed.doctor.rank_timing import RankTimer
    from gpufeed.doctor.ranks import GRACE_S, Exchange, RankGuard, rank_record
    from gpufeed.doctor.watch import Watcher

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
    _end_process_group()
    return status


def _report(args, context, exchange, watcher, problem: str | None, error: str | None, trial: dict | None) -> int:
    """Rank 0: gather every rank's record, diagnose, print, write; then tell the ranks it is done. In a --try
    job, write only rank 0's watched steps and the first problem of any rank (TRIAL_VARIABLE's result)."""
    import dataclasses
    import json
    import os

    from gpufeed.atomic import write_text_atomic
    from gpufeed.cli.doctor import show
    from gpufeed.cli.doctor_ranks_try import REPORT_VARIABLE
    from gpufeed.doctor.diagnose import diagnose, empty_report
    from gpufeed.doctor.ranks import rank_problems, with_ranks
    from gpufeed.doctor.report import Note

    try:
        records, missing = exchange.gather(args.timeout)
        others = [line for line in rank_problems(records, missing) if not line.startswith("rank 0:")]
        if trial is not None:
            first = problem or (others[0] if others else None)
            write_text_atomic(trial["result"], json.dumps(
                {"records": [dataclasses.asdict(record) for record in watcher.records], "problem": first}))
            return 1 if first else 0
        incomplete = Note("run", f"watch incomplete: rank 0: {problem}") if problem and error is None else None
        notes = ([incomplete] if incomplete else []) + [Note("run", f"watch incomplete: {line}") for line in others]
        seen = with_ranks(watcher.observe(error, notes), context.world_size, records, missing)
        if error is None and others:
            seen = _with_error(seen, others[0])
        report = diagnose(seen) if seen.steps else empty_report(seen)
        report.timeline["ranks"] = [{"rank": r["rank"], "steps": r["steps"]} for r in records]
        if args.json != "-":
            show(report if seen.steps else None, watcher, problem, list(seen.notes), shown=incomplete)
            _show_ranks(report)
        emit_document(report.to_json(), "doctor", args)
        if os.environ.get(REPORT_VARIABLE):  # the launcher's --try reads the diagnosis here
            write_text_atomic(os.environ[REPORT_VARIABLE], json.dumps(report.to_json()))
    finally:
        exchange.finish()
    return 1 if problem or others or not seen.steps else 0


def _with_error(seen, line: str):
    import dataclasses

    return dataclasses.replace(seen, script_error=line)


def _show_ranks(report) -> None:
    from rich.table import Table

    if not report.ranks:
        return
    table = Table(title=f"ranks ({report.verdict.world_size}), means per watched step")
    for column in ("rank", "steps", "step ms", "data wait ms", "forward ms", "backward ms", "optimizer ms",
                   "all-reduce in flight ms", "all-reduce waited ms", "MiB all-reduced"):
        table.add_column(column, justify="right")
    for rank in report.ranks:
        table.add_row(str(rank["rank"]), str(rank["steps"]), f"{rank['step_ms']:.1f}", f"{rank['data_wait_ms']:.1f}",
                      f"{rank['forward_ms']:.1f}", f"{rank['backward_ms']:.1f}", f"{rank['optimizer_ms']:.1f}",
                      f"{rank['collective_ms']:.1f}", f"{rank['exposed_ms']:.1f}",
                      f"{rank['bytes_per_step'] / 2**20:.2f}")
    console.print(table)


def _end_process_group() -> None:
    """Destroy the script's process group, left alive when the doctor stopped the script."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_now(status: int) -> None:
    """Flush and end the process at once (no interpreter shutdown: the main thread may be blocked in C, inside a
    collective that a failed rank will never join)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(status)
