"""The checks every page test makes: tags balance, charts counted, nothing fetched from outside, visible text.

Two parsers grew up beside two pages' tests: `parse_page` (asserts as it parses, keeps the text outside SVG)
and `page_structure` (returns its errors, for tests that check that bad markup is caught).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Parsed(HTMLParser):
    """Checks that every element the page opens is closed in order; counts charts, keeps the text outside SVG."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []  # open elements: (tag, is a chart figure)
        self.errors: list[str] = []
        self.charts = 0  # <figure class="chart"> elements whose first child is an <svg>
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "svg" and self.stack and self.stack[-1] == ("figure", True):
            self.charts += 1
        if tag not in VOID:
            self.stack.append((tag, tag == "figure" and ("class", "chart") in attrs))

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if not any(tag in ("svg", "style") for tag, _ in self.stack):
            self.text.append(data)


def parse_page(text: str) -> _Parsed:
    """The page parsed, after asserting that its tags balance and that it fetches nothing from outside."""
    parsed = _Parsed()
    parsed.feed(text)
    parsed.close()
    assert parsed.errors == [] and parsed.stack == [], (parsed.errors[:3], parsed.stack)
    assert text.startswith("<!DOCTYPE html>")
    outside_namespaces = re.sub(r'xmlns(:\w+)?="[^"]*"', "", text)
    assert "http://" not in outside_namespaces and "https://" not in outside_namespaces
    assert "<script" not in text and "<img" not in text and "<link" not in text
    return parsed


def visible(parsed: _Parsed) -> str:
    return " ".join(" ".join(parsed.text).split())


VOID_TAGS = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class PageStructure(HTMLParser):
    """Checks that every tag closes in order and counts the <figure class="chart"> that hold an <svg>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open_tags: list[str] = []
        self.errors: list[str] = []
        self.charts = 0
        self.chart_level: int | None = None
        self.chart_has_svg = False
        self.texts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            return
        self.open_tags.append(tag)
        if tag == "figure" and "chart" in (dict(attrs).get("class") or "").split():
            self.chart_level, self.chart_has_svg = len(self.open_tags), False
        elif tag == "svg" and self.chart_level is not None:
            self.chart_has_svg = True

    def handle_endtag(self, tag):
        if tag in VOID_TAGS:
            return
        if not self.open_tags or self.open_tags[-1] != tag:
            self.errors.append(f"</{tag}> where <{self.open_tags[-1] if self.open_tags else 'nothing'}> is open")
            return
        if tag == "figure" and self.chart_level == len(self.open_tags):
            self.charts += self.chart_has_svg
            self.chart_level = None
        self.open_tags.pop()

    def handle_data(self, data):
        self.texts.append(data)


def page_structure(text: str) -> PageStructure:
    parser = PageStructure()
    parser.feed(text)
    parser.close()
    if parser.open_tags:
        parser.errors.append(f"left open: {parser.open_tags}")
    return parser


def external_urls(text: str) -> list[str]:
    """Every http:// or https:// address that is not the value of an xmlns attribute."""
    found = []
    for match in re.finditer(r"https?://[^\s\"'<>)]*", text):
        if not re.search(r"xmlns(:\w+)?=\"$", text[max(0, match.start() - 40):match.start()]):
            found.append(match.group())
    return found
