"""The body checks of a document kind, written as data: the shape of each value its page reads.

A shape says what a value must be for the page to be made from it, and no more: a key the page reads with
`document["key"]` is required (`"key"`), one it reads with `.get` is optional (`"key?"`), a value it tolerates as
null is `Maybe(...)`; keys the page never reads are not checked (an older document, or an edited one that the page
does not read, still makes its page). `problem(value)` is None for a value of that shape, else the first thing
wrong, with its place in the document (`timeline[3].seconds`): the one line `gpufeed report` prints.

    Record({"model": Text, "timeline?": Maybe(ListOf(Record({"seconds": Number})))})
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

ABSENT = object()  # the value of a key a document lacks


@dataclass(frozen=True)
class Problem:
    """What is wrong with a document, where: a key it lacks (`missing`), else a value of the wrong kind."""

    place: str
    expected: str
    found: str = ""
    missing: bool = False

    def text(self) -> str:
        if self.missing:
            return f"lacks the key {self.place}"
        return f"has a value of the wrong kind ({self.place}: {self.expected} expected, found {self.found})"


def found(value: object) -> str:
    """A value's kind in JSON's words: null, true, a number, a string "…", a list, an object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}" if value else "an empty string"
    if isinstance(value, list):
        return "a list" if value else "an empty list"
    if isinstance(value, dict):
        return "an object" if value else "an empty object"
    return f"a {type(value).__name__}"


def _join(place: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{place}[{key}]"
    return f"{place}.{key}" if place else key


class Shape:
    """What one value must be. `words` names it in a message ("a number"); `problem` checks a value."""

    words: str

    def problem(self, value: object, place: str) -> Problem | None:
        raise NotImplementedError

    def wrong(self, value: object, place: str) -> Problem:
        return Problem(place or "the body", self.words, found(value))


@dataclass(frozen=True)
class Scalar(Shape):
    """A JSON scalar of one of `kinds`."""

    words: str
    kinds: tuple[type, ...]

    def problem(self, value: object, place: str) -> Problem | None:
        return None if isinstance(value, self.kinds) else self.wrong(value, place)


Number = Scalar("a number", (int, float))  # true and false too: Python reads them as 1 and 0, and so do the pages
Text = Scalar("a string", (str,))
Flag = Scalar("true or false", (bool,))
# a value the page looks another up by (a device in the table of peaks): any but a list or an object
Key = Scalar("a string, number, true, false or null", (str, int, float, type(None)))


class _Anything(Shape):
    words = "anything"

    def problem(self, value: object, place: str) -> Problem | None:
        return None


Anything = _Anything()


@dataclass(frozen=True)
class Maybe(Shape):
    """null, or a value of `shape`."""

    shape: Shape

    @property
    def words(self) -> str:
        return f"{self.shape.words} or null"

    def problem(self, value: object, place: str) -> Problem | None:
        return None if value is None else self.shape.problem(value, place)


@dataclass(frozen=True)
class EmptyOr(Shape):
    """A value the page reads as nothing when it is empty (`document.get("notes") or []`): null, false, 0, an
    empty string, list or object; else a value of `shape`."""

    shape: Shape

    @property
    def words(self) -> str:
        return self.shape.words

    def problem(self, value: object, place: str) -> Problem | None:
        return None if not value and isinstance(value, (type(None), bool, int, float, str, list, dict)) \
            else self.shape.problem(value, place)


@dataclass(frozen=True)
class Pattern(Shape):
    """A string that starts as `pattern` says (a matrix size, "512 x 512 x 512", is read as its first number)."""

    pattern: str
    words: str

    def problem(self, value: object, place: str) -> Problem | None:
        return None if isinstance(value, str) and re.match(self.pattern, value) else self.wrong(value, place)


@dataclass(frozen=True)
class ListOf(Shape):
    """A list of `item`s; `nonempty`: at least one; `length`: exactly that many."""

    item: Shape
    nonempty: bool = False
    length: int | None = None

    @property
    def words(self) -> str:
        if self.length is not None:
            return f"a list of {self.length}"
        return "a non-empty list" if self.nonempty else "a list"

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, list) or (self.nonempty and not value) or \
                (self.length is not None and len(value) != self.length):
            return self.wrong(value, place)
        if self.item is Anything:
            return None
        for index, item in enumerate(value):
            found_problem = self.item.problem(item, _join(place, index))
            if found_problem is not None:
                return found_problem
        return None


@dataclass(frozen=True)
class MapOf(Shape):
    """An object whose every value is a `value` (its keys are names: devices, settings)."""

    value: Shape = Anything
    words = "an object"

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, dict):
            return self.wrong(value, place)
        for key, item in value.items():
            found_problem = self.value.problem(item, _join(place, key))
            if found_problem is not None:
                return found_problem
        return None


@dataclass(frozen=True)
class Record(Shape):
    """An object with these keys (`"key"`: required, `"key?"`: optional), each of its shape. Other keys are free."""

    fields: dict[str, Shape]
    required: tuple[str, ...] = field(init=False)
    words = "an object"

    def __post_init__(self) -> None:
        object.__setattr__(self, "required", tuple(key for key in self.fields if not key.endswith("?")))

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, dict):
            return self.wrong(value, place)
        for key, shape in self.fields.items():
            name = key.rstrip("?")
            item = value.get(name, ABSENT)
            if item is ABSENT:
                if name in self.required:
                    return Problem(_join(place, name), shape.words, missing=True)
                continue
            found_problem = shape.problem(item, _join(place, name))
            if found_problem is not None:
                return found_problem
        return None


@dataclass(frozen=True)
class Either(Shape):
    """A value of any of `shapes` (tried in order). The problem named is the first found inside the value (by an
    alternative of its kind: a list's item, an object's key), else that it is none of them."""

    shapes: tuple[Shape, ...]

    def __init__(self, *shapes: Shape) -> None:
        object.__setattr__(self, "shapes", shapes)

    @property
    def words(self) -> str:
        return " or ".join(shape.words for shape in self.shapes)

    def problem(self, value: object, place: str) -> Problem | None:
        problems = []
        for shape in self.shapes:
            found_problem = shape.problem(value, place)
            if found_problem is None:
                return None
            problems.append(found_problem)
        deeper = [found_problem for found_problem in problems if found_problem.place != (place or "the body")]
        return deeper[0] if deeper else self.wrong(value, place)


@dataclass(frozen=True)
class IfKey(Shape):
    """An object of shape `then` when it has `key`, else of shape `otherwise` (a plan's compute from before the
    roofline has `mfu`, one after it `bytes_per_step`)."""

    key: str
    then: Shape
    otherwise: Shape
    words = "an object"

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, dict):
            return self.wrong(value, place)
        return (self.then if self.key in value else self.otherwise).problem(value, place)


@dataclass(frozen=True)
class Switch(Shape):
    """An object whose shape depends on one of its keys (a kernel's `op`: a matrix product's size is read as a
    number): `cases[value[key]]`, else `default`."""

    key: str
    cases: dict[str, Shape]
    default: Shape
    words = "an object"

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, dict):
            return self.wrong(value, place)
        tag = value.get(self.key)
        shape = self.cases.get(tag, self.default) if isinstance(tag, str) else self.default
        return shape.problem(value, place)


@dataclass(frozen=True)
class When(Shape):
    """An object that, when its `key` holds a value the page acts on (one that is true; `not_null`: any but null),
    must also be of `shape`: RAM to keep a dataset cached comes with its reason. `key` may be a path into the
    object ("verdict.primary")."""

    key: str
    shape: Shape
    not_null: bool = False
    words = "an object"

    def problem(self, value: object, place: str) -> Problem | None:
        if not isinstance(value, dict):
            return self.wrong(value, place)
        item = value
        for name in self.key.split("."):
            item = item.get(name) if isinstance(item, dict) else None
        acted_on = item is not None if self.not_null else bool(item)
        return self.shape.problem(value, place) if acted_on else None


@dataclass(frozen=True)
class All(Shape):
    """A value of every one of `shapes` (a record and the conditions on it); the first problem is named."""

    shapes: tuple[Shape, ...]

    def __init__(self, *shapes: Shape) -> None:
        object.__setattr__(self, "shapes", shapes)

    @property
    def words(self) -> str:
        return self.shapes[0].words

    def problem(self, value: object, place: str) -> Problem | None:
        for shape in self.shapes:
            found_problem = shape.problem(value, place)
            if found_problem is not None:
                return found_problem
        return None


@dataclass(frozen=True)
class Rule(Shape):
    """A value that `holds` (a test between its parts, which no shape above says: each worker's memory read at
    every reading), named by `words`. A value the test cannot read is the problem of the shapes beside it: a Rule
    sits in All(...) after them."""

    words: str
    holds: Callable[[object], bool]

    def problem(self, value: object, place: str) -> Problem | None:
        return None if self.holds(value) else Problem(place or "the body", self.words, "otherwise")
