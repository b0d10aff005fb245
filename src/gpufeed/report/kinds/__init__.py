"""The kinds of saved document, one module each, and `KINDS`, the one list: `about.command` -> its DocumentKind.

Each kind declares the keys only its body has, its body check (the shape of every value its page reads, as data),
its page and its old key names; report/document.py checks a document and makes its page through it alone.
compare/kinds.py gives the kinds a comparison can be of (compare.py's `COMPARED`) their comparable figures.

Modules:
- kind.py: DocumentKind, the contract; the machine readings every page's conditions block reads; RENAMED_KEYS
- shapes.py: the shapes a body check is written in (Record, ListOf, Number, Maybe, ...) and the problem they name
- train.py: the train result
- doctor.py: the doctor result
- bench.py: the bench result
- plan.py: the plan result, an image model's or a language model's
- compare.py: the comparison of two results of one of COMPARED (doctor, train, bench)
"""

from __future__ import annotations

from gpufeed.report.kinds.bench import BENCH
from gpufeed.report.kinds.compare import COMPARE
from gpufeed.report.kinds.doctor import DOCTOR
from gpufeed.report.kinds.kind import DocumentKind
from gpufeed.report.kinds.plan import PLAN
from gpufeed.report.kinds.train import TRAIN

KINDS: dict[str, DocumentKind] = {kind.command: kind for kind in (TRAIN, DOCTOR, BENCH, PLAN, COMPARE)}
