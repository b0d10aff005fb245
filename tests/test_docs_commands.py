"""Every gpufeed command the README and docs/*.md show still parses: the words after `gpufeed` go through the real
command-line parser (nothing runs), so an option renamed or removed in the code cannot stay in the documents."""

import re
import shlex
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


def test_the_capture_script_keeps_the_lines_its_marker_asks_for():
    """docs/captures.py, the one script that regenerates the documents' captured outputs: its line selection."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("captures", ROOT / "docs" / "captures.py")
    captures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(captures)
    output = ["gpufeed doctor: running x.py", "verdict: input_bound: 85%", "a table", "more", "verified: 2.1x",
              "page: doctor.html"]
    assert captures.kept(output, "all") == output
    assert captures.kept(output, "1-2 -1") == ["gpufeed doctor: running x.py", "verdict: input_bound: 85%", "...",
                                               "page: doctor.html"]
    assert captures.kept(output, "/^verdict:/ /^verified:/") == ["...", "verdict: input_bound: 85%", "...",
                                                                  "verified: 2.1x", "..."]
    marked = [name for _, _, name, _ in captures.captures(None)]
    assert "bench-quick" in marked and len(marked) == len(set(marked))  # each capture named once
