"""The saved result of a command (its `--json` output) and the page made from it.

Every command that has a page (train, doctor, bench, plan, compare) writes, beside its own keys, an `about`
block: which command and format wrote it, the gpufeed version, the date, the exact command line and the machine
(`gpufeed info`'s probe). A page is a pure function of that document, so `gpufeed report RUN.json` rebuilds
on a laptop the very page that `--html` wrote on the GPU server. What each kind of document holds, what its page
reads and which page it is, is its kind's (report/kinds/): this module only looks the kind up by `about.command`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

from gpufeed.errors import ConfigError
from gpufeed.report.kinds import KINDS

FORMAT = 2  # what this version writes; raised when a document gains keys a reader needs (2: the samples)
READABLE_FORMATS = (1, 2)  # what it reads: format 1 lacks format 2's samples, and its pages are made all the same


def about(command: str, argv: list[str] | None = None, machine: dict | None = None) -> dict:
    """The `about` block for a document written now by `command` (argv: the words after `gpufeed`)."""
    from gpufeed import __version__

    if machine is None:
        from gpufeed.hardware.probe import probe_machine

        machine = to_jsonable(probe_machine())
    words = list(sys.argv[1:] if argv is None else argv)
    return {"command": command, "format": FORMAT, "gpufeed": __version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": ["gpufeed", *words], "machine": machine}


def to_jsonable(value: Any) -> Any:
    """Dataclasses, paths, numpy scalars and NaN made JSON-safe (NaN and infinities become null)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def load_document(path: str | Path) -> dict:
    """Read a saved `--json` document and check that a page can be made from it (one-line errors)."""
    source = Path(path)
    if not source.is_file():
        raise ConfigError(f"{path}: no such file; give the JSON that `gpufeed train|doctor|bench|plan --json` wrote")
    try:
        # NaN and infinities (Python's json writes them) read as null, as the commands write them
        document = json.loads(source.read_text(encoding="utf-8"), parse_constant=lambda _name: None)
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file; give the JSON that a gpufeed command wrote") from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno}; "
                          f"truncated?): write it again with the command's --json") from None
    return check_document(document, str(path))


def current_names(document: dict) -> dict:
    """A document under today's key names (its kind's `current_names`: train's and bench's test_* keys); a
    document of no known kind as it is. A copy where anything is renamed: the document given is never changed."""
    block = document.get("about")
    command = block.get("command") if isinstance(block, dict) else None
    kind = KINDS.get(command) if isinstance(command, str) else None
    return document if kind is None else kind.current_names(document)


def check_document(document: object, name: str = "the document") -> dict:
    """`document` under today's key names when its page can be made from it: an `about` block naming a command
    with a page and a format this gpufeed reads, that command's body keys, and every value its page reads of the
    kind the page reads (its kind's body check). Else one line saying what is wrong (ConfigError)."""
    if not isinstance(document, dict) or not isinstance(document.get("about"), dict):
        raise ConfigError(f"{name} has no 'about' block: pages are made from what `gpufeed train|doctor|bench|plan "
                          f"--json` writes (info and pack have no page; older results: run the command again)")
    block = document["about"]
    command, version = block.get("command"), block.get("format")
    kind = KINDS.get(command) if isinstance(command, str) else None
    if kind is None:
        raise ConfigError(f"{name} was written by `gpufeed {command}`, which has no page; pages exist for "
                          f"{', '.join(KINDS)}")
    writer, whole = block.get("gpufeed", "?"), isinstance(version, int) and not isinstance(version, bool)
    if whole and version > max(READABLE_FORMATS):
        raise ConfigError(f"{name} is report format {version} (gpufeed {writer}), newer than this gpufeed reads "
                          f"({_formats_text()}): upgrade gpufeed (pip install -U gpufeed) or use the version that "
                          f"wrote it")
    if not whole or version not in READABLE_FORMATS:  # missing, a string, 0: not a format any gpufeed wrote
        raise ConfigError(f"{name} is report format {version!r} (gpufeed {writer}); this gpufeed reads format "
                          f"{_formats_text()}: use the gpufeed version that wrote it, or run the command again")
    if not all(key in document for key in kind.body_keys):
        like = [other.command for other in KINDS.values()
                if other is not kind and all(key in document for key in other.body_keys)]
        looks = f"; its body is a {like[0]} result" if like else ""
        raise ConfigError(f"{name} says `gpufeed {command}` wrote it, but it lacks a {command} result's keys "
                          f"({', '.join(key for key in kind.body_keys if key not in document)}){looks}: was its "
                          f"about.command edited? write it again with `gpufeed {command} --json`")
    document = kind.current_names(document)
    problem = kind.problem(document)
    if problem is not None:
        raise ConfigError(f"the {command} document {problem.text()}: was it edited or damaged? write it again with "
                          f"`gpufeed {command} --json`")
    return document


def _formats_text() -> str:
    """READABLE_FORMATS in words: "1 and 2"."""
    *earlier, last = map(str, READABLE_FORMATS)
    return f"{', '.join(earlier)} and {last}" if earlier else last


def render(document: dict) -> str:
    """The page's HTML for a document: checked first (check_document: a damaged or edited document is one line,
    ConfigError), then made by its kind's page. Nothing else is caught: an error in a page is a bug of gpufeed's."""
    document = check_document(document)
    from gpufeed.report.html import chart_style

    with chart_style():
        return KINDS[document["about"]["command"]].page(document).render()
