"""gpufeed doctor's A/B mode: `--baseline SCRIPT` and/or `--baseline-args "ARGS"` run a baseline and the new
script alternately in pairs, each in its own process, and write one comparison (compare/pairs.py's `run_ab`)."""

from __future__ import annotations

import shlex

from gpufeed.cli.output import check_output_paths, error_console
from gpufeed.errors import GpufeedError


def wanted(args) -> bool:
    return args.baseline is not None or args.baseline_args is not None


def sides(args):
    """(BASE, NEW) from the command line: the baseline is `--baseline` (else the same script) with
    `--baseline-args` (else the same arguments); the two must differ."""
    from gpufeed.doctor.observe.inject import check_target
    from gpufeed.doctor.runs.script import Script

    if not args.command:
        raise GpufeedError("give the new training script after the flags: gpufeed doctor --baseline OLD.py NEW.py "
                           "[ARGS...]")
    target, script_args = args.command[0], tuple(args.command[1:])
    check_target(target, args.module)
    baseline = args.baseline or target
    check_target(baseline, args.module)
    try:
        baseline_args = tuple(shlex.split(args.baseline_args)) if args.baseline_args is not None else script_args
    except ValueError as error:
        raise GpufeedError(f"--baseline-args {args.baseline_args!r}: {error}; quote it as a shell would") from None
    base, new = Script(baseline, baseline_args, args.module), Script(target, script_args, args.module)
    if base == new:
        raise GpufeedError("--baseline and --baseline-args give the same command as the new one: name another "
                           "script (--baseline ../main/train.py) or other arguments (--baseline-args \"...\")")
    return base, new


def run(args, settings) -> int:
    from gpufeed.cli.compare import finish
    from gpufeed.compare.pairs import run_ab
    from gpufeed.doctor.runs.pairs import planned_runs

    if args.try_fixes:
        raise GpufeedError("--try and --baseline are two modes: measure the fixes first (--try), then compare the "
                           "fixed script with --baseline")
    base, new = sides(args)
    inputs = tuple(script.target for script in (base, new) if not script.is_module)
    check_output_paths(args, inputs=inputs)
    runs = len(planned_runs(args.pairs, warm_up=True))
    error_console.print(f"gpufeed doctor: A/B, {args.pairs} pair{'s' * (args.pairs != 1)} of runs (BASE: "
                        f"{base.named()}; NEW: {new.named()}), {runs} runs of {args.warmup} + "
                        f"{args.steps} steps, each in its own process")

    def progress(done: int, total: int, what: str) -> None:
        error_console.print(f"  run {done + 1}/{total}: {what}")

    comparison, _, _ = run_ab(base, new, args.pairs, settings, args.nproc_per_node,
                              on_run=progress)
    return finish(comparison, args)
