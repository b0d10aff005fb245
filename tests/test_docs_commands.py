"""Every gpufeed command the README and docs/*.md show still parses: the words after `gpufeed` go through the real
command-line parser (nothing runs), so an option renamed or removed in the code cannot stay in the documents."""

import re
import shlex
import sys
from pathlib import Path

import pytest

from gpufeed.cli.main import UsageError, build_parser, parse_words

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(path: Path):
    """(first line number, lines) of each fenced block."""
    block, start = None, 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            if block is None:
                block, start = [], number + 1
            else:
                yield start, block
                block = None
        elif block is not None:
            block.append(line)


def shown_commands() -> list[tuple[str, int, str]]:
    """(file, line, command) for each command a fenced block shows: in a captured run (a block with `$ ` lines),
    its `$ gpufeed ...` lines, the output after them left alone; in a block of commands, every `gpufeed ...` line.
    A trailing comment, a pipe or a redirect is cut, and commands joined by && or ; are split."""
    found = []
    for path in DOCUMENTS:
        for start, lines in _blocks(path):
            captured = any(line.lstrip().startswith("$ ") for line in lines)
            for offset, line in enumerate(lines):
                text = line.lstrip()
                if captured and not text.startswith("$ "):
                    continue
                for part in re.split(r"&&|;", text.removeprefix("$ ")):
                    part = part.strip()
                    if part.startswith("gpufeed "):
                        found.append((path.name, start + offset, re.split(r"\s+#|\s\||\s>", part)[0]))
    return found


COMMANDS = shown_commands()


def test_the_documents_show_commands():
    assert len(COMMANDS) >= 20 and {command.split()[1] for _, _, command in COMMANDS} >= {
        "train", "doctor", "plan", "bench", "compare", "pack"}


@pytest.mark.parametrize("where, line, command", COMMANDS, ids=[f"{w}:{n}" for w, n, _ in COMMANDS])
def test_every_shown_command_parses(where, line, command):
    words = shlex.split(command)[1:]
    try:
        args = parse_words(build_parser(), words)
    except UsageError:
        pytest.fail(f"{where}:{line}: `{command}` no longer parses")
    assert callable(getattr(args, "handler", None))  # a command was chosen (doctor's own `command` shadows the name)


def _capture_script():
    """docs/captures.py as a module (docs/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("captures", ROOT / "docs" / "captures.py")
    captures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(captures)
    return captures


def test_the_capture_script_keeps_the_lines_its_marker_asks_for():
    """docs/captures.py, the one script that regenerates the documents' captured outputs: its line selection."""
    captures = _capture_script()
    output = ["gpufeed doctor: running x.py", "verdict: input_bound: 85%", "a table", "more", "verified: 2.1x",
              "page: doctor.html"]
    assert captures.kept(output, "all") == output
    assert captures.kept(output, "1-2 -1") == ["gpufeed doctor: running x.py", "verdict: input_bound: 85%", "...",
                                               "page: doctor.html"]
    assert captures.kept(output, "/^verdict:/ /^verified:/") == ["...", "verdict: input_bound: 85%", "...",
                                                                  "verified: 2.1x", "..."]
    assert captures.kept(output, "/^verdict:/ ~12") == ["...", "verdict: ...", "..."]  # cut to 12 characters
    assert captures.kept(output, "all ~14") == ["gpufeed doc...", "verdict: in...", "a table", "more",
                                                "verified: 2.1x", "page: docto..."]
    marked = [name for _, _, name, _ in captures.captures(None)]
    assert "bench-quick" in marked and len(marked) == len(set(marked))  # each capture named once


def test_the_capture_script_rewrites_a_block_and_its_caption_once(tmp_path):
    """docs/captures.py's regenerate on a page of one marked block: the commands run in the folder, the kept lines
    replace the old output, and one caption under the block says when and where, however often it runs."""
    captures = _capture_script()
    page = tmp_path / "page.md"
    page.write_text("Intro\n<!-- capture demo: keep /^t/ -->\n```\n$ printf 'one\\ntwo\\nthree\\n'\nold output\n```\n"
                    "After\n")
    for date in ("2026-01-01", "2026-01-02"):
        captures.regenerate(page, 1, "demo", "/^t/", tmp_path, date, "a test machine")
    assert page.read_text().splitlines() == [
        "Intro", "<!-- capture demo: keep /^t/ · captured 2026-01-02 -->", "```", "$ printf 'one\\ntwo\\nthree\\n'",
        "...", "two", "three", "```", "<sub>captured 2026-01-02 on a test machine by docs/captures.py</sub>", "After"]


def test_the_capture_script_shows_both_streams_in_the_order_they_were_written(tmp_path):
    """A command's standard error lines sit where a terminal shows them, between its standard output lines (one
    pipe for both, the child's Python unbuffered), not gathered after them."""
    captures = _capture_script()
    command = (f"{sys.executable} -c \"import sys; print('out 1'); print('err 2', file=sys.stderr); "
               f"print('out 3'); sys.stderr.write('err 4\\\\n')\"")
    assert captures.run(command, tmp_path) == ["out 1", "err 2", "out 3", "err 4"]


def test_the_capture_script_s_photos_are_jpegs_of_three_shapes_and_one_truncated_file(tmp_path):
    """docs/captures.py's generated photos (what `gpufeed train --data photos/train` packs in docs/train.md): every
    file decodes with PIL at 200-400 px a side, but the truncated one, which PIL refuses."""
    from PIL import Image

    captures = _capture_script()
    captures.make_photos(tmp_path, train=2, val=1)
    files = sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*.jpg"))
    assert files == sorted([f"{split}/{shape}/{index:04d}.jpg" for split, count in (("train", 2), ("val", 1))
                            for shape in ("circles", "squares", "triangles") for index in range(count)]
                           + ["train/squares/truncated.jpg"])
    for name in files:
        with Image.open(tmp_path / name) as image:
            if name.endswith("truncated.jpg"):
                with pytest.raises(OSError):
                    image.load()
            else:
                image.load()
                assert image.format == "JPEG" and all(200 <= side <= 400 for side in image.size)
