"""`gpufeed doctor` on several ranks: `--nproc-per-node N` launches the ranks through torch.distributed.run, and
each rank (found from torchrun's environment) runs the script watched, sends its record, and rank 0 prints and
writes the one report. The library does the work (doctor/session.py's `doctor_ranks` for the launcher,
doctor/ranks/rank.py's `run_rank` for a rank); this module prints (cli/doctor_show.py), writes and says the exit
status. Ranks other than 0 print nothing of the doctor's. With --try every run of the script is its own job."""

from __future__ import annotations

import os
import sys

from gpufeed.cli.doctor_show import show, show_gains, show_notes, show_plan, show_ranks
from gpufeed.cli.output import check_output_paths, emit_document, error_console
from gpufeed.errors import GpufeedError


def launch(args, settings) -> int:
    """Run the doctor as args.nproc_per_node ranks on this machine through torch's own launcher; with --try,
    then each experiment's runs, each its own job."""
    from gpufeed.doctor.observe.inject import check_target
    from gpufeed.doctor.runs.script import Script
    from gpufeed.doctor.session import doctor_ranks

    if not args.command:
        raise GpufeedError("give the training script: gpufeed doctor --nproc-per-node N SCRIPT [ARGS...]")
    script = Script.from_words(args.command, args.module)
    check_target(script.target, script.is_module)
    check_output_paths(args, inputs=() if script.is_module else (script.target,))
    error_console.print(f"gpufeed doctor: {args.nproc_per_node} ranks through torch.distributed.run "
                        f"(--standalone); rank 0 writes the report")
    ran = doctor_ranks(script, settings, args.nproc_per_node, args.try_fixes, args.repeats, _output_words(args),
                       on_plan=lambda planned: show_plan(planned, args.repeats, args.steps, ranks=args.nproc_per_node))
    if ran.failed_ranks or ran.report is None:
        if args.try_fixes:
            error_console.print("gpufeed doctor --try: not tried, the first run failed; fix that first")
        else:
            which = (f"on rank {', '.join(map(str, ran.failed_ranks))}" if ran.failed_ranks else
                     "before rank 0 wrote its report")
            error_console.print(f"gpufeed doctor: the job failed {which} (exit status not 0); the report above "
                                f"names the rank and its error")
        return 1
    if args.try_fixes:  # the diagnosis was printed and written by rank 0; now the report with the gains
        if args.json != "-":
            show_gains(ran.report)
            show_notes(list(ran.tried_notes))
        emit_document(ran.report.to_json(), "doctor", args)
    return 0


def _output_words(args) -> tuple[str, ...]:
    """The --json and --html that each rank gets (rank 0 writes them)."""
    return tuple(word for flag in ("json", "html") if getattr(args, flag) is not None
                 for word in (f"--{flag}", getattr(args, flag)))


def run_rank(args, context, settings) -> int:
    """One rank of a torchrun job: watch the script, send the record; rank 0 gathers, shows and writes."""
    from gpufeed.doctor.observe.inject import check_target
    from gpufeed.doctor.ranks.job import trial_from_environment
    from gpufeed.doctor.ranks.rank import run_rank as run_this_rank
    from gpufeed.doctor.runs.script import Script

    if not args.command:
        raise GpufeedError("give the training script: torchrun ... -m gpufeed doctor SCRIPT [ARGS...]")
    if args.try_fixes:
        raise GpufeedError("--try runs each run of the script as its own job: use gpufeed doctor --nproc-per-node N "
                           "--try SCRIPT instead of torchrun")
    script = Script.from_words(args.command, args.module)
    check_target(script.target, script.is_module)
    if context.is_main and trial_from_environment() is None:
        check_output_paths(args, inputs=() if script.is_module else (script.target,))
        error_console.print(f"gpufeed doctor: rank 0 of {context.world_size}: running {'-m ' if args.module else ''}"
                            f"{script.target}; watching {args.steps} steps after {args.warmup} warm-up steps on "
                            f"every rank; stopping after {args.timeout:g} s without a step")

    def publish(job, problem: str | None) -> None:
        if args.json != "-":
            show(job.report if job.watched else None, job.batch_from_loader, problem, list(job.notes),
                 shown=job.incomplete)
            show_ranks(job.report)
        emit_document(job.report.to_json(), "doctor", args)

    return run_this_rank(script, settings, context, publish, exit_now).status


def exit_now(status: int) -> None:
    """Flush and end the process at once (no interpreter shutdown: the main thread may be blocked in C, inside a
    collective that a failed rank will never join)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(status)
