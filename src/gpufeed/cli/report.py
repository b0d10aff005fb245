"""gpufeed report: rebuild the HTML page of a saved train, doctor, bench or plan result."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpufeed.cli.output import add_json_flag, check_output_paths, console, emit_json
from gpufeed.units import bytes_text

EXAMPLES = """examples:
  gpufeed bench --json bench.json            # on the GPU server
  gpufeed report bench.json                  # on a laptop: writes bench.html beside it
  gpufeed report run.json --html ~/pages/run.html

The page is made from the saved document alone (its `about` block says which command wrote it, on what machine
and when), so it is the same page that the command's own --html writes.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser("report", help="rebuild the HTML page of a saved --json result",
                                   description="Make the self-contained HTML page of a train, doctor, bench or plan "
                                               "result saved with --json.",
                                   epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("document", metavar="RUN.json", help="what `gpufeed train|doctor|bench|plan --json` wrote")
    parser.add_argument("--html", metavar="PATH", default=None, help="the page to write (default: RUN.html beside it)")
    add_json_flag(parser, "write what was done as JSON to PATH ('-' for standard output)")
    parser.set_defaults(handler=run)


def run(args) -> int:
    from gpufeed.report.document import load_document, render
    from gpufeed.report.html import write_html

    target = Path(args.html) if args.html else Path(args.document).with_suffix(".html")
    args.html = str(target)  # the default page is checked like a chosen one: not the document, not a folder
    check_output_paths(args, inputs=(args.document,))
    document = load_document(args.document)
    page = render(document)
    write_html(target, page)
    about, size = document["about"], len(page.encode("utf-8"))
    if args.json != "-":
        console.print(f"page: {target} ({about['command']} of {about.get('created', 'an unknown date')}, "
                      f"{bytes_text(size, 'KiB', 0)})")
    emit_json({"page": str(target), "command": about["command"], "created": about.get("created"), "bytes": size},
              args.json)
    return 0
