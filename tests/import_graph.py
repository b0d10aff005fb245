"""The import graph of a package tree read from its code with `ast`, and the three checks tests/test_architecture.py
makes of src/gpufeed against docs/design.md: no circle between modules, only the package arrows the design's
table allows, no private name reached across modules; and the design's layout listing exactly the modules.

Every import counts: top level, inside functions and under TYPE_CHECKING alike (a circle hidden in a function is
still a circle). A module's unit is the longest row of the arrows table whose dotted name starts its own
(`doctor.findings.input_bound` belongs to `doctor.findings` when that row exists, else to `doctor`); `gpufeed`
is the package's own `__init__.py`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Module:
    name: str  # dotted, relative to the tree's package: "doctor.findings.input_bound"; "" for the root __init__
    path: Path
    is_package: bool
    tree: ast.Module
    imports: set[str] = field(default_factory=set)  # module names it imports, resolved to modules of the tree


def read_tree(package_dir: Path) -> dict[str, Module]:
    """Every .py file under package_dir (the folder holding the root __init__.py), parsed, imports resolved."""
    modules: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    root = package_dir.name
    for module in modules.values():
        for node in ast.walk(module.tree):
            for target in _imported(node, module, root):
                found = _nearest(target, modules)
                if found is not None and found != module.name:
                    module.imports.add(found)
    return modules


def _imported(node: ast.AST, module: Module, root: str) -> list[str]:
    """Dotted names (relative to the root package) an import node names, each as deep as it could be a module."""
    if isinstance(node, ast.Import):
        return [_relative(alias.name, root) for alias in node.names if _inside(alias.name, root)]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.name.split(".") if module.name else []
        base = base if module.is_package else base[:-1]
        base = base[:len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    elif _inside(node.module or "", root):
        prefix = _relative(node.module, root)
    else:
        return []
    return [".".join(part for part in (prefix, alias.name) if part) for alias in node.names]


def _inside(name: str, root: str) -> bool:
    return name == root or name.startswith(root + ".")


def _relative(name: str, root: str) -> str:
    return name[len(root) + 1:] if name != root else ""


def _nearest(name: str, modules: dict[str, Module]) -> str | None:
    while name not in modules:
        if not name:
            return None
        name = name.rpartition(".")[0]
    return name


def circles(modules: dict[str, Module]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in modules:
        if start in index:
            continue
        work = [(start, iter(sorted(modules[start].imports)))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(modules[step].imports))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found, key=len, reverse=True)


ARROWS_HEADING = "## Arrows between packages"


def read_arrows(design: str) -> dict[str, set[str]]:
    """The arrows table under ARROWS_HEADING: unit -> the units it may import (first two columns, in backticks)."""
    section = design.split(ARROWS_HEADING, 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        unit = re.findall(r"`([^`]+)`", cells[0])[0]
        rows[unit] = set(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def unit_of(module: str, units: set[str]) -> str | None:
    """The longest unit that is the module or a dotted prefix of it; the root __init__ is unit `gpufeed`."""
    if module == "":
        return "gpufeed" if "gpufeed" in units else None
    candidates = [unit for unit in units if module == unit or module.startswith(unit + ".")]
    return max(candidates, key=len, default=None)


def forbidden_arrows(modules: dict[str, Module], arrows: dict[str, set[str]]) -> list[str]:
    """One line per import between two units that the importer's row does not allow, or module in no row."""
    units = set(arrows)
    problems = []
    for module in modules.values():
        own = unit_of(module.name, units)
        if own is None:
            problems.append(f"{module.path}: its module {module.name or 'gpufeed'} is in no row of the arrows table")
            continue
        for target in sorted(module.imports):
            theirs = unit_of(target, units)
            if theirs is not None and theirs != own and theirs not in arrows[own]:
                problems.append(f"{module.name} imports {target}: `{own}` may not import `{theirs}`")
    return problems


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(tree: ast.Module) -> set[str]:
    """Private names a module defines: functions, classes, assignments, attributes set on any object."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            names.add(node.arg)  # dataclasses.replace(x, _field=...) and the like
    return {name for name in names if _is_private(name)}


def _torch_privates() -> set[str]:
    """Private attributes torch's own modules and tensors carry (`module._buffers`): reaching them is torch's
    business, not a gpufeed module's private name, whatever gpufeed module also uses the word."""
    import torch

    return {name for name in dir(torch.nn.Module()) + dir(torch.empty(0)) if _is_private(name)}


def private_reaches(sources: list[Path], modules: dict[str, Module], root: str = "gpufeed") -> list[str]:
    """Private gpufeed names used outside the module that defines them: imported by name (`from gpufeed.x import
    _y`), or read as an attribute (`feed._draws`) in a file that does not define that name itself, when some
    gpufeed module defines it. `self._x` and `cls._x` are the object's own; torch's own private attributes
    are left out (_torch_privates)."""
    defined_in: dict[str, set[str]] = {}
    torch_names = _torch_privates()
    for module in modules.values():
        for name in _defined_privates(module.tree) - torch_names:
            defined_in.setdefault(name, set()).add(module.name)
    problems = []
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        own = _defined_privates(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and _inside(node.module, root):
                problems += [f"{path}:{node.lineno}: imports {alias.name} from {node.module}"
                             for alias in node.names if _is_private(alias.name)]
            elif isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr in defined_in \
                    and node.attr not in own and not (isinstance(node.value, ast.Name)
                                                      and node.value.id in ("self", "cls")):
                where = ", ".join(sorted(name or root for name in defined_in[node.attr]))
                problems.append(f"{path}:{node.lineno}: reaches {node.attr} (defined in {where})")
    return problems


LAYOUT_HEADING = "## Layout"
_ENTRY = re.compile(r"^((?:[\w.]+/|[\w.]+\.py)(?: (?:[\w.]+/|[\w.]+\.py))*)(?:\s{2,}|$)")


def layout_modules(design: str, top: str = "src/gpufeed/") -> set[str]:
    """The .py paths the design's layout block lists, relative to `top`, by indentation (two spaces a level);
    a line may list several modules of one folder ("info.py pack.py train.py   one per command")."""
    section = design.split(LAYOUT_HEADING, 1)[1].split("```", 2)[1]
    folders: list[str] = []
    listed: set[str] = set()
    for line in section.splitlines():
        stripped = line.lstrip(" ")
        if stripped.startswith(top):
            folders = []
            continue
        indent = len(line) - len(stripped)
        match = _ENTRY.match(stripped)
        if match is None or indent % 2 or indent // 2 - 1 > len(folders):
            continue  # a description's continuation, or not an entry
        folders = folders[:indent // 2 - 1]
        for token in match.group(1).split(" "):
            if token.endswith("/"):
                folders.append(token.rstrip("/"))
            else:
                listed.add("/".join([*folders, token]))
    return listed


def tree_modules(package_dir: Path) -> set[str]:
    return {str(path.relative_to(package_dir)) for path in package_dir.rglob("*.py")}
