"""The two lists of document kinds agree: report's (report/kinds/: KINDS, and COMPARED, what a comparison can be
of) and compare's (compare/kinds.py: COMPARABLE, each with its figures), and no generic code tests a kind's name."""

from __future__ import annotations

import re
from pathlib import Path

from gpufeed.compare.kinds import COMPARABLE
from gpufeed.report.kinds import KINDS
from gpufeed.report.kinds.compare import COMPARED

SOURCE = Path(__file__).resolve().parents[2] / "src" / "gpufeed"
# a comparison of a command's name with a literal, or of `command` with anything: a kind switched on by name
NAME_TEST = re.compile(r"""\bcommand\s*[!=]=|[!=]=\s*["'](train|doctor|bench|plan|compare)["']""")


def test_each_kind_is_listed_under_its_own_command():
    assert all(name == kind.command for name, kind in KINDS.items())
    assert list(KINDS) == ["train", "doctor", "bench", "plan", "compare"]  # the order pages are listed in
    assert all(name == comparable.kind.command for name, comparable in COMPARABLE.items())


def test_compare_compares_exactly_the_kinds_a_comparison_can_be_of():
    """Report's compare kind (its page, its `command` check) and compare's adapters list the same kinds, the
    same objects, in the same order (the order of "gpufeed compare reads doctor, train and bench results")."""
    assert [comparable.kind for comparable in COMPARABLE.values()] == list(COMPARED)
    assert all(KINDS[kind.command] is kind for kind in COMPARED)


def name_tests(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if NAME_TEST.search(line)]


def test_no_kind_is_switched_on_by_name_in_report_or_compare():
    assert name_tests('if command == "doctor":\n    x = 1\nparts = kind != "plan"\nfine = about["command"]\n') == [
        'if command == "doctor":', 'parts = kind != "plan"']
    found = {path.relative_to(SOURCE).as_posix(): name_tests(path.read_text(encoding="utf-8"))
             for folder in ("report", "compare") for path in sorted((SOURCE / folder).rglob("*.py"))}
    assert {path: lines for path, lines in found.items() if lines} == {}
