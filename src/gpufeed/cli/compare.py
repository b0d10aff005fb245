"""gpufeed compare: two saved results of the same command side by side, which part of the step moved, whether
the difference is real, and (`--fail-if-slower`) a gate for CI. The doctor's A/B mode ends here too."""

from __future__ import annotations

import argparse

from rich.table import Table
from rich.text import Text

from gpufeed.cli.output import add_html_flag, add_json_flag, check_output_paths, console, emit_document
from gpufeed.report.compare_markdown import cell, judged
from gpufeed.units import NA

EXAMPLES = """examples:
  gpufeed doctor --json before.json train.py         # then change the script, and
  gpufeed doctor --json after.json train.py
  gpufeed compare before.json after.json             # which part of the step moved, and is it real
  gpufeed compare --fail-if-slower 10 main.json pr.json      # exit 3 on a real slowdown over 10%
  gpufeed compare --markdown summary.md --html page.html base.json new.json
  gpufeed compare bench-a.json bench-b.json          # two machines, or a driver before and after

Reads doctor, train and bench results (their --json). Each difference is judged by a block bootstrap over the
runs' per-step records (a format-1 result, without them, compares on totals and says so); one within the noise
is "no change", with its interval. For two runs made back to back on a shared machine, the doctor's A/B mode
(gpufeed doctor --baseline ...) is steadier.
Exit status: 0 compared (also when slower within the noise, or under the gate's percent), 2 wrong input,
3 NEW is slower per sample than --fail-if-slower allows and the difference is real.
"""
GATE_EXIT = 3


def percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 1000.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a percentage such as 10 (0 to 999), got {text}")
    return value


def add_gate_flags(parser) -> None:
    """--fail-if-slower and --markdown, shared with the doctor's A/B mode."""
    parser.add_argument("--fail-if-slower", type=percent, default=None, metavar="PCT",
                        help="exit status 3 when NEW is slower per sample by more than PCT percent and the "
                             "difference is real (beyond the noise)")
    parser.add_argument("--markdown", metavar="PATH", default=None,
                        help="also write a short Markdown summary (the headline and a table of the parts) for a "
                             "pull-request comment")


def register(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="two saved results side by side: what moved, and is it real",
                                   description="Compares two saved results of the same command (doctor, train or "
                                               "bench): each figure and part of the step, the difference, and "
                                               "whether it is beyond the noise.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", metavar="BASE.json", help="the baseline result (its --json)")
    parser.add_argument("new", metavar="NEW.json", help="the result to compare with it")
    add_gate_flags(parser)
    add_json_flag(parser, "write the comparison as JSON to PATH ('-' for standard output)")
    add_html_flag(parser)
    parser.set_defaults(handler=run)


def figures_table(document: dict) -> Table:
    table = Table(title="BASE against NEW (interval: 95%, of NEW - BASE)")
    for column in ("figure", "unit", "BASE", "NEW", "NEW - BASE", "NEW / BASE", "interval", "judged"):
        table.add_column(column, justify="left" if column in ("figure", "unit", "judged") else "right")
    for figure in document["figures"]:
        unit, interval = figure["unit"], figure["interval"]
        difference = figure["difference"]
        table.add_row(("  " * figure["level"]) + figure["name"], unit, cell(figure["base"], unit),
                      cell(figure["new"], unit), NA if difference is None else f"{difference:+,.3g}",
                      NA if figure["ratio"] is None else f"{figure['ratio']:.3f}",
                      "" if interval is None else f"{interval[0]:+,.3g} to {interval[1]:+,.3g}",
                      judged(figure).strip("*"))
    return table


def show(document: dict) -> None:
    console.print(Text(document["headline"], style="bold"))
    console.print(f"BASE: {document['base']}\nNEW:  {document['new']}")
    for line in document["conditions"]:
        console.print(Text(f"differs: {line}", style="yellow"))
    console.print(figures_table(document))
    changed = [f for f in document["findings"] if f["status"] != "same"]
    if document["command"] == "doctor":
        verdicts = document["verdicts"]
        console.print(f"verdict: {verdicts['base'] or 'none'} (BASE), {verdicts['new'] or 'none'} (NEW)")
        for finding in changed:
            console.print(f"finding {finding['kind']}: {finding['status']} ({finding['base'] or '-'} -> "
                          f"{finding['new'] or '-'})")
    console.print(f"judged by: {document['method']}")
    for note in document["notes"]:
        console.print(Text(f"note: {note}"))
    if document.get("gate"):
        console.print(Text(document["gate"]["sentence"], style="bold red" if document["gate"]["failed"] else "bold"))


def finish(comparison, args) -> int:
    """Gate, print, and write the comparison's document, page and Markdown; the exit status."""
    from gpufeed.atomic import write_text_atomic
    from gpufeed.compare.model import gate
    from gpufeed.report.compare_markdown import markdown
    from gpufeed.report.document import to_jsonable

    body = to_jsonable(comparison.to_json())
    outcome = gate(comparison, args.fail_if_slower) if args.fail_if_slower is not None else None
    body["gate"] = None if outcome is None else to_jsonable(outcome)
    if args.json != "-":
        show(body)
    emitted = emit_document(body, "compare", args)
    if args.markdown:
        from gpufeed.report.document import about

        document = emitted or {"about": about("compare", getattr(args, "argv", None)), **body}
        write_text_atomic(args.markdown, markdown(document))
        console.print(f"markdown: {args.markdown}")
    return GATE_EXIT if outcome is not None and outcome.failed else 0


def run(args) -> int:
    from gpufeed.compare.documents import compare_files

    check_output_paths(args, inputs=(args.base, args.new))
    return finish(compare_files(args.base, args.new), args)
