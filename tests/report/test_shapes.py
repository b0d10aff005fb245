"""The body checks' shapes (report/kinds/shapes.py) on hand-made values: what passes, and the one problem named
(its place in the document, what was expected, what was found)."""

from __future__ import annotations

from gpufeed.report.kinds.shapes import (
    All,
    Anything,
    Either,
    EmptyOr,
    IfKey,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Pattern,
    Record,
    Rule,
    Switch,
    Text,
    When,
)

STEP = Record({"wall_s": Number, "note?": Maybe(Text)})
BODY = Record({"steps": ListOf(STEP), "notes?": EmptyOr(ListOf(Text)), "settings": MapOf(Number)})


def text(shape, value) -> str | None:
    problem = shape.problem(value, "")
    return None if problem is None else problem.text()


def test_a_record_names_the_first_key_it_lacks_or_the_first_value_of_the_wrong_kind():
    good = {"steps": [{"wall_s": 0.1}, {"wall_s": 2, "note": None}], "settings": {"lr": 0.1}, "extra": "free"}
    assert text(BODY, good) is None
    assert text(BODY, {**good, "steps": [{"wall_s": 0.1}, {}]}) == "lacks the key steps[1].wall_s"
    assert text(BODY, {**good, "steps": [{"wall_s": "0.1"}]}) == \
        "has a value of the wrong kind (steps[0].wall_s: a number expected, found the string '0.1')"
    assert text(BODY, {**good, "steps": {"wall_s": 1}}) == \
        "has a value of the wrong kind (steps: a list expected, found an object)"
    assert text(BODY, {**good, "settings": {"lr": None}}) == \
        "has a value of the wrong kind (settings.lr: a number expected, found null)"
    assert text(BODY, [good]) == "has a value of the wrong kind (the body: an object expected, found a list)"


def test_optional_null_and_empty_values_pass_as_the_page_reads_them():
    assert text(Record({"a?": Number}), {}) is None and text(Record({"a?": Number}), {"a": None}) is not None
    assert text(Maybe(Number), None) is None and text(Maybe(Number), "") is not None
    for empty in (None, [], {}, "", 0, False):  # `document.get("notes") or []`
        assert text(EmptyOr(ListOf(Text)), empty) is None
    assert text(EmptyOr(ListOf(Text)), [3]) == "has a value of the wrong kind ([0]: a string expected, found the " \
                                                "number 3)"
    assert text(Number, True) is None  # Python reads true as 1, and so do the pages
    assert text(Anything, object()) is None


def test_lists_of_a_length_and_patterns():
    pair = ListOf(Number, length=2)
    assert text(pair, [1, 2]) is None and "a list of 2 expected" in text(pair, [1])
    assert "a non-empty list expected, found an empty list" in text(ListOf(Number, nonempty=True), [])
    size = Pattern(r"\s*\d+\s*(x|$)", "a size such as '512 x 512'")
    assert text(size, "512 x 512") is None and text(size, "64") is None
    assert "a size such as '512 x 512' expected, found the string 'big'" in text(size, "big")


def test_conditional_shapes_pick_their_case():
    kernel = Switch("op", {"matmul": Record({"size": Text})}, Record({"op": Anything}))
    assert text(kernel, {"op": "conv2d"}) is None and text(kernel, {"op": "matmul"}) == "lacks the key size"
    assert text(kernel, {}) == "lacks the key op"
    compute = IfKey("mfu", Record({"mfu": Number}), Record({"bytes": Number}))
    assert text(compute, {"mfu": 0.4}) is None and text(compute, {}) == "lacks the key bytes"
    cache = All(Record({"cache?": Number}), When("cache", Record({"reason": Text})))
    assert text(cache, {"cache": 0}) is None and text(cache, {"cache": 5}) == "lacks the key reason"
    band = When("low", Record({"high": Number}), not_null=True)
    assert text(band, {"low": None}) is None and text(band, {"low": 0}) == "lacks the key high"


def test_either_names_the_problem_inside_the_value_and_a_rule_its_words():
    listed = Either(ListOf(Number), MapOf(Number))
    assert text(listed, [1]) is None and text(listed, {"a": 1}) is None
    assert text(listed, [1, "x"]) == \
        "has a value of the wrong kind ([1]: a number expected, found the string 'x')"
    assert text(listed, 3) == "has a value of the wrong kind (the body: a list or an object expected, found the " \
                              "number 3)"
    band = Rule("low <= high", lambda value: value["low"] <= value["high"])
    assert text(band, {"low": 1, "high": 2}) is None
    assert text(band, {"low": 3, "high": 2}) == \
        "has a value of the wrong kind (the body: low <= high expected, found otherwise)"
