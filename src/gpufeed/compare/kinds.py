"""`COMPARABLE`, the one list of what compare can compare: `about.command` -> its Comparable (comparable.py), in
the order compare names them. It is report/kinds/compare.py's COMPARED, each kind with its comparable figures
(tests/compare/test_kinds.py holds the two equal)."""

from __future__ import annotations

from gpufeed.compare.bench import BENCH
from gpufeed.compare.comparable import Comparable
from gpufeed.compare.doctor import DOCTOR
from gpufeed.compare.train import TRAIN

COMPARABLE: dict[str, Comparable] = {comparable.kind.command: comparable for comparable in (DOCTOR, TRAIN, BENCH)}
