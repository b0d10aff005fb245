"""The comparison (cli/compare.py's and the doctor's A/B mode's --json, docs/design.md "compare"): its body keys
and what its page (report/compare_page.py) reads. `COMPARED` are the kinds a comparison can be of, in the order
compare names them; compare/kinds.py gives each its comparable figures, and a test holds the two lists equal. A
comparison of a kind with a verdict (the doctor's) also sets both runs' verdicts and findings side by side."""

from __future__ import annotations

from gpufeed.report.kinds.bench import BENCH
from gpufeed.report.kinds.doctor import DOCTOR
from gpufeed.report.kinds.kind import DocumentKind
from gpufeed.report.kinds.shapes import All, Anything, EmptyOr, Key, ListOf, Maybe, Number, Record, Switch, Text, When
from gpufeed.report.kinds.train import TRAIN

COMPARED = (DOCTOR, TRAIN, BENCH)
BY_COMMAND = {kind.command: kind for kind in COMPARED}
FIGURE = All(Record({"key": Anything, "name": Text, "unit": Anything, "level": Anything, "base": Maybe(Number),
                     "new": Maybe(Number), "difference": Maybe(Number), "real": Anything,
                     "interval": Maybe(ListOf(Number, length=2)), "lower_is_better": Anything}),
             When("real", Record({"difference": Number})))  # a real change is worse or better by its sign
FIELDS = {"command": Key, "headline": Anything, "base": Anything,
          "new": Anything, "gate?": EmptyOr(Record({"sentence": Anything})), "conditions": EmptyOr(ListOf(Anything)),
          "figures": ListOf(FIGURE), "method": Anything, "notes": EmptyOr(ListOf(Anything)),
          "distributions?": EmptyOr(Record({"base?": EmptyOr(ListOf(Number)), "new?": EmptyOr(ListOf(Number))}))}
WITH_VERDICTS = Record({**FIELDS, "verdicts": Record({"base": Anything, "new": Anything}),
                        "findings": ListOf(Record({"kind": Anything, "status": Anything, "base": Anything,
                                                   "new": Anything}))})
BODY = Switch("command", {kind.command: WITH_VERDICTS for kind in COMPARED if kind.has_verdict}, Record(FIELDS))


def _page(document: dict):
    from gpufeed.report.compare_page import compare_page

    compared = BY_COMMAND.get(document["command"])
    return compare_page(document, verdicts=compared is not None and compared.has_verdict)


COMPARE = DocumentKind("compare", ("headline", "figures", "method"), BODY, _page)
