"""Regenerate the captured outputs of README.md and docs/*.md, so that none drifts from the code. Run by hand (not in
CI: it runs trainings and plans for minutes), from the repository's root:

    python docs/captures.py            # every marked capture
    python docs/captures.py --list     # what is marked, where
    python docs/captures.py NAME ...   # these only

A captured block is a fenced block whose line above is a marker:

    <!-- capture NAME: keep SPEC -->

Its `$ ` lines are the commands; they run in order in one scratch folder, SCRATCH, made afresh, with COLUMNS=100. It
holds the test scripts of tests/doctor/scripts and its frameworks/ (so `gpufeed doctor input_bound.py` finds its
script) and `photos/`, generated (`make_photos`: 900 training and 150 validation JPEGs of 200-400 px, circles,
squares and triangles on noise, one class a folder, and one truncated file). The block is written back: each
command's `$ ` line, then the lines of its output that SPEC keeps, one `...` for each run of lines left out. SPEC
is `all`, or items separated by spaces: `1-3` (lines 1 to 3 of the output), `-2` (the last two), `/REGEX/` (every
line it matches), and `~N`, which cuts each kept line longer than N characters to N, ending in `...`. The date
and the machine are printed first and written under each block (`<sub>captured DATE on MACHINE by
docs/captures.py</sub>`, the date into the marker too); a command that fails stops the script before its block is
written (the blocks before it are).
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
SCRATCH = Path(tempfile.gettempdir()) / "gpufeed-captures"  # one fixed path, so the outputs name the same files
SHAPES = ("circles", "squares", "triangles")
# the line under each captured block, which says when and where it was made (rewritten on each regeneration)
CAPTION = re.compile(r"^<sub>captured .* by docs/captures\.py</sub>$")


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"


def kept(lines: list[str], spec: str) -> list[str]:
    """The output lines `spec` keeps (the module's docstring), in order, '...' for each run left out."""
    items = re.findall(r"/[^/]+/|\S+", spec)
    widths = [int(item[1:]) for item in items if item.startswith("~")]
    items = [item for item in items if not item.startswith("~")]
    if widths:
        cut = widths[0]
        return [line if len(line) <= cut else line[:cut - 3] + "..." for line in kept(lines, " ".join(items))]
    if items == ["all"]:
        return lines
    chosen: set[int] = set()
    for item in items:
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


def make_photos(folder: Path, train: int = 300, val: int = 50, seed: int = 0) -> None:
    """`folder`/train and `folder`/val, one subfolder a shape (SHAPES): `train` and `val` JPEGs of each, 200-400 px
    a side, the shape drawn in a random colour on uniform noise; and train/squares/truncated.jpg, a JPEG cut to its
    first 1,000 bytes (the pack skips it and names it)."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("val", val)):
        for shape in SHAPES:
            (folder / split / shape).mkdir(parents=True)
            for index in range(count):
                width, height = (int(side) for side in rng.integers(200, 401, size=2))
                image = Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8))
                draw = ImageDraw.Draw(image)
                side = min(width, height)
                x, y = int(rng.integers(0, width - side // 2)), int(rng.integers(0, height - side // 2))
                box = (x, y, x + side // 2, y + side // 2)
                colour = tuple(int(value) for value in rng.integers(0, 256, size=3))
                if shape == "circles":
                    draw.ellipse(box, fill=colour)
                elif shape == "squares":
                    draw.rectangle(box, fill=colour)
                else:
                    draw.polygon([(box[0], box[3]), (box[2], box[3]), ((box[0] + box[2]) // 2, box[1])], fill=colour)
                image.save(folder / split / shape / f"{index:04d}.jpg", quality=90)
    whole = (folder / "train" / "squares" / "0000.jpg").read_bytes()
    (folder / "train" / "squares" / "truncated.jpg").write_bytes(whole[:1000])


def run(command: str, folder: Path) -> list[str]:
    # one pipe for both streams, unbuffered, so that the lines come in the order a terminal shows them
    environment = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(command, shell=True, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=environment)
    if done.returncode not in (0, 3):  # 3: compare's gate said slower, an output like any other
        sys.exit(f"error: `{command}` exited {done.returncode}: {done.stdout.strip()[-500:]}")
    return [line.rstrip() for line in done.stdout.rstrip("\n").splitlines()]


def captures(names: set[str] | None):
    """(path, marker line index, name, keep) of each marked block."""
    for path in DOCUMENTS:
        for index, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            match = MARKER.match(line)
            if match and (not names or match["name"] in names):
                yield path, index, match["name"], match["keep"]


def regenerate(path: Path, index: int, name: str, keep: str, folder: Path, date: str, where: str) -> None:
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
    caption = f"<sub>captured {date} on {where} by docs/captures.py</sub>"
    after = end + 1
    if after < len(lines) and CAPTION.match(lines[after]):
        lines[after] = caption
    else:
        lines[after:after] = [caption]
    lines[start + 1:end] = block
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    found = list(captures(set(args.names)))
    unknown = sorted(set(args.names) - {name for _, _, name, _ in found})
    if unknown:
        sys.exit(f"error: no capture is named {', '.join(unknown)}; `python docs/captures.py --list` shows the names")
    if args.list:
        for path, index, name, keep in found:
            print(f"{path.relative_to(ROOT)}:{index + 1}: {name} (keep {keep})")
        return
    date = datetime.date.today().isoformat()
    where = machine()
    print(f"captures of {date} on {where}")
    shutil.rmtree(SCRATCH, ignore_errors=True)
    SCRATCH.mkdir()
    try:
        for script in [*INPUTS.glob("*.py"), *INPUTS.glob("frameworks/*.py")]:
            shutil.copy(script, SCRATCH)
        make_photos(SCRATCH / "photos")
        for path, _, name, keep in found:  # one at a time: each rewrite moves the lines below it
            print(f"{path.relative_to(ROOT)}: {name}", flush=True)
            marker = next(i for p, i, n, _ in captures({name}) if p == path)
            regenerate(path, marker, name, keep, SCRATCH, date, where)
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
