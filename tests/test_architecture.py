"""The house holds its shape: src/gpufeed read with `ast` (tests/import_graph.py) against docs/design.md.

- no import circle between modules, counting imports inside functions and under TYPE_CHECKING;
- every import between two packages is an arrow the design's table allows (its rows are the units);
- no private gpufeed name reached from another module, in src/ or tests/;
- the design's layout lists exactly the modules in the tree;
- each sub-package's `__init__.py` docstring (its map) names every module and sub-package in its folder.
Each check is first shown to fail on a small planted tree, so a pass means something.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from import_graph import (
    circles,
    forbidden_arrows,
    layout_modules,
    private_reaches,
    read_arrows,
    read_tree,
    tree_modules,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpufeed"
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "gpufeed"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


PLANTED_DESIGN = """
## Layout

```
src/gpufeed/
  __init__.py         the root
  low/                below
    __init__.py       map
    a.py b.py         two modules
  high/
    __init__.py       map
    c.py              on top, and its description runs on to
                      a second line that names d.py, which is not an entry
```

## Arrows between packages

| package | may import | why |
|---|---|---|
| `gpufeed` | | nothing |
| `high` | `low` | builds on it |
| `low` | | the bottom |

## Next
"""


def test_a_circle_hidden_in_a_function_is_found(tmp_path):
    package = _plant(tmp_path, {
        "__init__.py": "", "low/__init__.py": "", "high/__init__.py": "",
        "low/a.py": "from gpufeed.low.b import thing\n",
        "low/b.py": "def thing():\n    from gpufeed.low import a\n    return a\n",
        "high/c.py": "from ..low import a\n"})
    modules = read_tree(package)
    assert modules["low.b"].imports == {"low.a"} and modules["high.c"].imports == {"low.a"}
    assert circles(modules) == [["low.a", "low.b"]]
    (package / "low" / "b.py").write_text("thing = 1\n", encoding="utf-8")
    assert circles(read_tree(package)) == []


def test_an_arrow_the_table_does_not_allow_is_named(tmp_path):
    package = _plant(tmp_path, {
        "__init__.py": "", "low/__init__.py": "", "high/__init__.py": "", "low/b.py": "",
        "low/a.py": "import typing\nif typing.TYPE_CHECKING:\n    from gpufeed.high.c import Top\n",
        "high/c.py": "from gpufeed.low.a import x\nclass Top: ...\n"})
    arrows = read_arrows(PLANTED_DESIGN)
    assert arrows == {"gpufeed": set(), "high": {"low"}, "low": set()}
    assert forbidden_arrows(read_tree(package), arrows) == ["low.a imports high.c: `low` may not import `high`"]
    (package / "stray.py").write_text("", encoding="utf-8")
    assert any("stray is in no row" in line for line in forbidden_arrows(read_tree(package), arrows))


def test_private_names_across_modules_are_found(tmp_path):
    package = _plant(tmp_path, {
        "__init__.py": "", "low/__init__.py": "",
        "low/a.py": ("def _draws():\n    return 1\nclass Feed:\n    def __init__(self):\n        self._finish = 2\n"
                     "        self._buffers = {}\n"),
        "low/b.py": ("from gpufeed.low.a import _draws, Feed\nfeed = Feed()\n"
                     "print(feed._finish, feed.__class__, feed._buffers)\n"
                     "class Own:\n    def __init__(self):\n        self._finish = 0\n    def same(self, other):\n"
                     "        return other._finish\n")})
    modules = read_tree(package)
    found = private_reaches([package / "low" / "b.py"], modules)
    # b defines _finish itself; _buffers is also torch's (every nn.Module has one), so it is not ours to judge
    assert len(found) == 1 and "imports _draws from gpufeed.low.a" in found[0]
    (package / "low" / "b.py").write_text("from gpufeed.low.a import Feed\nprint(Feed()._finish)\n")
    modules = read_tree(package)
    assert [line.split(": ", 1)[1] for line in private_reaches([package / "low" / "b.py"], modules)] == [
        "reaches _finish (defined in low.a)"]


def test_the_layout_is_read_by_indentation(tmp_path):
    assert layout_modules(PLANTED_DESIGN) == {"__init__.py", "low/__init__.py", "low/a.py", "low/b.py",
                                              "high/__init__.py", "high/c.py"}


def test_src_has_no_import_circle():
    assert circles(read_tree(PACKAGE)) == []


def test_every_arrow_between_packages_is_in_the_design():
    assert forbidden_arrows(read_tree(PACKAGE), read_arrows(DESIGN)) == []


def test_no_private_name_is_reached_across_modules():
    sources = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    planted = [path for path in sources if path.name in ("test_architecture.py", "import_graph.py")]
    assert private_reaches([p for p in sources if p not in planted], read_tree(PACKAGE)) == []


def test_the_design_layout_lists_exactly_the_modules():
    listed, present = layout_modules(DESIGN), tree_modules(PACKAGE)
    assert sorted(present - listed) == [] and sorted(listed - present) == []


def unmapped(package: Path) -> dict[str, list[str]]:
    """Each sub-package's modules (name.py) and sub-packages (name/) its `__init__.py` docstring does not name.
    The root's map is design.md's layout (checked above), so the root is left out."""
    missing = {}
    for init in sorted(package.rglob("__init__.py")):
        if init.parent == package:
            continue
        text = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        named = set(re.findall(r"\b[a-z_0-9]+\.py\b", text)) | set(re.findall(r"\b[a-z_0-9]+/", text))
        present = {path.name for path in init.parent.glob("*.py") if path.name != "__init__.py"} | \
            {f"{path.name}/" for path in init.parent.iterdir() if (path / "__init__.py").exists()}
        if present - named:
            missing[init.relative_to(package).parent.as_posix()] = sorted(present - named)
    return missing


def test_a_module_its_package_map_leaves_out_is_named(tmp_path):
    package = _plant(tmp_path, {"__init__.py": '"""the root"""', "low/__init__.py": '"""- a.py: one"""',
                                "low/a.py": "", "low/b.py": "", "low/deep/__init__.py": '"""- c.py"""',
                                "low/deep/c.py": ""})
    assert unmapped(package) == {"low": ["b.py", "deep/"]}


def test_every_package_map_names_its_modules():
    assert unmapped(PACKAGE) == {}


def test_the_findings_load_without_torch():
    """The report pages read doctor.findings on machines that only view documents."""
    code = "import sys; sys.modules['torch'] = None; import gpufeed.doctor.findings"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_arrows_table_itself_has_no_cycle():
    """Rows that may import each other, directly or around a loop, would let a circle of packages pass."""
    from import_graph import Module

    arrows = read_arrows(DESIGN)
    rows = {unit: Module(unit, Path(unit), False, None, set(allowed)) for unit, allowed in arrows.items()}
    assert all(target in rows for allowed in arrows.values() for target in allowed)
    assert circles(rows) == []
