"""gpufeed doctor: run a training script unmodified, watch some steps, and say what holds it back."""

from __future__ import annotations

import argparse

from gpufeed.cli.compare import add_gate_flags
from gpufeed.cli.doctor_show import show, show_plan
from gpufeed.cli.output import add_html_flag, add_json_flag, check_output_paths, emit_document, error_console
from gpufeed.errors import GpufeedError

EXAMPLES = """examples:
  gpufeed doctor train.py --epochs 1                 # the script's own flags pass through
  gpufeed doctor --steps 100 --json report.json train.py
  gpufeed doctor -m mypackage.train --config small.yaml
  gpufeed doctor --try train.py                      # also measure what the leading fixes gain
  gpufeed doctor --html report.html train.py         # a page: the step timeline, host readings, findings
  gpufeed doctor --try --repeats 1 train.py          # one pair of runs per experiment: quicker, noisier
  gpufeed doctor --nproc-per-node 2 train_ddp.py     # 2 ranks through torchrun; stragglers, all-reduce
  torchrun --nproc-per-node 8 -m gpufeed doctor train_ddp.py   # the same, launched by you (several nodes too)
  gpufeed doctor --baseline ../main/train.py train.py          # A/B: another checkout's script against this one
  gpufeed doctor --baseline-args "--workers 0" train.py --workers 4   # A/B: the same script, other arguments
  gpufeed doctor --baseline ../main/train.py --fail-if-slower 10 --markdown ab.md train.py   # a CI gate

The script runs in this process as `python SCRIPT ARGS` (or `python -m MODULE ARGS`) would: its argv, sys.path[0],
__name__ == "__main__", your working directory. Steps are found through the DataLoader, the optimizer's step, or
else the model's forward and backward. After --warmup steps, --steps steps are watched; then --profile-steps more
run under torch.profiler (operators and kernels per step, the device's true busy time; the watched steps carry no
profiler cost); then the script is stopped and the report printed after the script's own output. The JSON goes
to a file: the script shares standard output.
With --try the script then runs again for each experiment (3 at most), each with one change (batches replayed
from memory, more DataLoader workers, a doubled batch, bf16 autocast): --repeats pairs of a fresh baseline run then
the changed run, and the gain is the median of the pairs' samples/s ratios, with its range. A finding's headline is
the gain of the fix it recommends; replayed batches are the bound if input were free, shown beside it, never as
the fix's gain; the finding's confidence is at most what the spread of the pairs allows. That is 2 x repeats
more runs per experiment (18 with the defaults); the first run is not a baseline (it ran cold).
With --baseline and/or --baseline-args (A/B): one warm-up run of the baseline, then --pairs pairs of runs, BASE and
NEW alternately (BASE NEW, NEW BASE, ...), each `gpufeed doctor --json` in its own process (two checkouts never
share imported modules), and one comparison of them as `gpufeed compare` shows it.
Exit status: 0 a report, 1 the script raised or no training step was seen, 2 wrong input, 3 (with
--fail-if-slower) NEW is slower per sample than allowed and the difference is real.
"""


def _count(minimum: int):
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def register(subparsers) -> None:
    parser = subparsers.add_parser("doctor", help="run your training script, watch it, and say what holds it back",
                                   description="Runs a training script unmodified with instrumentation, watches "
                                               "some steps, stops it, and reports where the step time goes.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=_count(1), default=50, help="steps to watch (default 50)")
    parser.add_argument("--warmup", type=_count(0), default=5, help="steps to let pass first (default 5)")
    parser.add_argument("--profile-steps", type=_count(0), default=5,
                        help="steps profiled after the watched ones: operator and kernel counts (default 5; 0: none)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                        help="stop the script when no step ends for this long (default 60)")
    add_json_flag(parser, "write the report as JSON to PATH ('-': standard output, mixed with the script's own)")
    add_html_flag(parser)
    parser.add_argument("--try", dest="try_fixes", action="store_true",
                        help="re-run the script with each leading fix applied and report the measured gain")
    parser.add_argument("--repeats", type=_count(1), default=3, metavar="N",
                        help="with --try: pairs of runs (a fresh baseline, then the change) per experiment; the gain "
                             "is the median ratio (default 3)")
    parser.add_argument("--baseline", metavar="SCRIPT", default=None,
                        help="A/B: run this baseline script (another checkout's, say) and SCRIPT alternately in pairs, "
                             "each in its own process, and compare them (with SCRIPT's arguments unless "
                             "--baseline-args)")
    parser.add_argument("--baseline-args", metavar="\"ARGS\"", default=None,
                        help="A/B: the baseline's arguments, one quoted string (the baseline is SCRIPT itself unless "
                             "--baseline names another)")
    parser.add_argument("--pairs", type=_count(1), default=3, metavar="N",
                        help="A/B: pairs of runs (default 3; a change is real when every pair moved the same way)")
    add_gate_flags(parser)
    parser.add_argument("--nproc-per-node", type=_count(1), default=None, metavar="N",
                        help="run the script as N ranks on this machine through torch.distributed.run (torchrun), "
                             "watched on every rank; rank 0 writes one report")
    parser.add_argument("-m", dest="module", action="store_true", help="SCRIPT is a module, run as python -m")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                        help="the training script (or module, with -m) and its own arguments")
    parser.set_defaults(handler=run)


def settings_of(args, profile_steps: int | None = None):
    """How each run is watched, from the command line (doctor/runs/script.py's WatchSettings)."""
    from gpufeed.doctor.runs.script import WatchSettings

    return WatchSettings(args.steps, args.warmup, args.profile_steps if profile_steps is None else profile_steps,
                         args.timeout)


def run(args) -> int:
    from gpufeed.cli import doctor_ab, doctor_ranks
    from gpufeed.doctor.observe.inject import check_target
    from gpufeed.doctor.ranks.context import RankContext
    from gpufeed.doctor.runs.script import Script
    from gpufeed.doctor.session import doctor_script

    if doctor_ab.wanted(args):
        return doctor_ab.run(args, settings_of(args, profile_steps=0))
    if args.fail_if_slower is not None or args.markdown is not None:
        raise GpufeedError("--fail-if-slower and --markdown compare two runs: give the baseline with --baseline "
                           "SCRIPT or --baseline-args \"ARGS\" (or compare two saved results: gpufeed compare)")
    if args.nproc_per_node is not None and args.nproc_per_node > 1:
        return doctor_ranks.launch(args, settings_of(args))
    context = RankContext.from_environment()
    if context is not None:
        return doctor_ranks.run_rank(args, context, settings_of(args))
    if not args.command:
        raise GpufeedError("give the training script: gpufeed doctor SCRIPT [ARGS...] (or -m MODULE [ARGS...])")
    script = Script.from_words(args.command, args.module)
    check_target(script.target, script.is_module)
    check_output_paths(args, inputs=() if script.is_module else (script.target,))
    if args.json == "-":
        error_console.print("warning: --json - mixes the report with the script's own standard output")
    error_console.print(f"gpufeed doctor: running {'-m ' if args.module else ''}{script.target}; watching "
                        f"{args.steps} steps after {args.warmup} warm-up steps; stopping after {args.timeout:g} s "
                        f"without a step")
    session = doctor_script(script, settings_of(args), args.try_fixes, args.repeats,
                            on_plan=lambda planned: show_plan(planned, args.repeats, args.steps))
    if args.json != "-":
        show(session.report if session.watched else None, session.batch_from_loader, session.problem,
             [] if session.watched else list(session.notes), shown=session.incomplete)
    emit_document(session.report.to_json(), "doctor", args)
    return 1 if session.failed else 0
