"""Regenerate the captured outputs of README.md and docs/*.md, so that none drifts from the code. Run by hand (not in
CI: it runs trainings and plans for minutes), from the repository's root:

    python docs/captures.py            # every marked capture
    python docs/captures.py --list     # what is marked, where
    python docs/captures.py NAME ...   # these only

A captured block is a fenced block whose line above is a marker:

    <!-- capture NAME: keep SPEC -->

Its `$ ` lines are the commands; they run in order in one scratch folder (the test scripts of
tests/doctor/scripts copied in, so `gpufeed doctor input_bound.py` finds its script), with COLUMNS=100, and the
block is written back: each command's `$ ` line, then the lines of its output that SPEC keeps, one `...` for each
run of lines left out. SPEC is `all`, or items separated by spaces: `1-3` (lines 1 to 3 of the output), `-2` (the
last two), or `/REGEX/` (every line it matches). The date and the machine are printed first and written into the
marker (`captured DATE`), and a command that fails stops the script before anything is written.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^<!-- capture (?P<name>[\w-]+): keep (?P<keep>.*?)(?: · captured [^>]*)? -->$")
INPUTS = ROOT / "tests" / "doctor" / "scripts"


def machine() -> str:
    import torch

    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, torch {torch.__version__}")


def kept(lines: list[str], spec: str) -> list[str]:
    """The output lines `spec` keeps (the module's docstring), in order, '...' for each run left out."""
    if spec.strip() == "all":
        return lines
    chosen: set[int] = set()
    for item in re.findall(r"/[^/]+/|\S+", spec):
        if item.startswith("/"):
            pattern = re.compile(item[1:-1])
            chosen |= {index for index, line in enumerate(lines) if pattern.search(line)}
        elif item.startswith("-"):
            chosen |= set(range(max(len(lines) + int(item), 0), len(lines)))
        else:
            first, _, last = item.partition("-")
            chosen |= set(range(int(first) - 1, min(int(last or first), len(lines))))
    out: list[str] = []
    for index, line in enumerate(lines):
        if index in chosen:
            out.append(line)
        elif not out or out[-1] != "...":
            out.append("...")
    return out


def run(command: str, folder: Path) -> list[str]:
    environment = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    done = subprocess.run(command, shell=True, cwd=folder, capture_output=True, text=True, env=environment)
    if done.returncode not in (0, 3):  # 3: compare's gate said slower, an output like any other
        sys.exit(f"error: `{command}` exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return [line.rstrip() for line in (done.stdout + done.stderr).rstrip("\n").splitlines()]


def captures(names: set[str] | None):
    """(path, marker line index, name, keep) of each marked block."""
    for path in DOCUMENTS:
        for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            match = MARKER.match(line)
            if match and (not names or match["name"] in names):
                yield path, index, match["name"], match["keep"]


def regenerate(path: Path, index: int, name: str, keep: str, folder: Path, date: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = index + 1
    if not lines[start].startswith("```"):
        sys.exit(f"error: {path.name}:{index + 1}: the capture {name}'s marker is not above a fenced block")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line[2:] for line in lines[start + 1:end] if line.startswith("$ ")]
    if not commands:
        sys.exit(f"error: {path.name}:{index + 1}: the capture {name} has no `$ ` command")
    block = []
    for command in commands:
        block += [f"$ {command}", *kept(run(command, folder), keep)]
    lines[index] = f"<!-- capture {name}: keep {keep} · captured {date} -->"
    lines[start + 1:end] = block
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    found = list(captures(set(args.names)))
    if args.list:
        for path, index, name, keep in found:
            print(f"{path.relative_to(ROOT)}:{index + 1}: {name} (keep {keep})")
        return
    date = datetime.date.today().isoformat()
    print(f"captures of {date} on {machine()}")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for script in INPUTS.glob("*.py"):
            shutil.copy(script, folder)
        for path, _, name, keep in found:  # one at a time: each rewrite moves the lines below it
            print(f"{path.relative_to(ROOT)}: {name}", flush=True)
            marker = next(i for p, i, n, _ in captures({name}) if p == path)
            regenerate(path, marker, name, keep, folder, date)


if __name__ == "__main__":
    main()
