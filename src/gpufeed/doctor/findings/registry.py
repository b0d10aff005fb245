"""The registry of finding kinds: `KINDS`, the one list of the kinds, in the vocabulary's order (docs/design.md,
"The doctor's vocabulary"), which is also the order of detection and of ties between equal shares.

findings/__init__.py fills it, one line per kind, when the package is imported, so it is full before any module of
findings/ runs (Python imports a package before its modules). It lives in a module of its own, below everything
else in findings/, because report.py reads it (a Finding's kind must be registered; the verdict's line takes a
kind's own words) and the kind modules build on report.py: the registry imports nothing of findings/, so there is
no circle, not even one hidden in a function. Its entries are `Kind` objects (kind.py), read here only by their
`NAME`, `MEANING` and `HEALTHY`: kind.py builds on report.py too, so this module does not import it for the
annotation either.

Adding a kind is its module in kinds/, its line in findings/__init__.py and its row in the vocabulary; `register`
and `unregister` also let a test register a kind of its own for a while (tests/doctor/test_kind_contract.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Registry:
    """The registered kinds by name, in the order registered. A kind is any object with the contract of
    findings/kind.py's `Kind`."""

    def __init__(self) -> None:
        self._kinds: dict[str, Any] = {}

    def register(self, *kinds: Any) -> None:
        """Each kind after those registered, in the order given; a name registered twice is an error."""
        for kind in kinds:
            if kind.NAME in self._kinds:
                raise ValueError(f"the finding kind {kind.NAME!r} is registered already")
            self._kinds[kind.NAME] = kind

    def unregister(self, name: str) -> None:
        """Forget a kind (a test's own, registered for the test only)."""
        del self._kinds[name]

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __getitem__(self, name: str) -> Any:
        return self._kinds[name]

    def get(self, name: str) -> Any | None:
        """The kind of that name, or None (a saved document's kind that is no longer registered)."""
        return self._kinds.get(name)

    def __iter__(self) -> Iterator[Any]:
        return iter(tuple(self._kinds.values()))

    def __len__(self) -> int:
        return len(self._kinds)

    @property
    def names(self) -> tuple[str, ...]:
        """The kinds' names in the registry's order: the vocabulary."""
        return tuple(self._kinds)

    def index(self, name: str) -> int:
        """The kind's place in the vocabulary (detection and ties between equal shares follow it)."""
        return self.names.index(name)

    @property
    def healthy(self) -> Any:
        """The one kind that is the verdict when no waste reaches its level (`HEALTHY`: compute_bound), judged last
        over the others."""
        found = [kind for kind in self._kinds.values() if kind.HEALTHY]
        if len(found) != 1:
            raise LookupError(f"one registered kind must be HEALTHY, found {[kind.NAME for kind in found]}")
        return found[0]

    def meaning(self, name: str, unknown: str) -> str:
        """The kind's meaning in a line (the page's), or `unknown` for a kind not registered."""
        kind = self._kinds.get(name)
        return kind.MEANING if kind is not None else unknown


KINDS = Registry()
