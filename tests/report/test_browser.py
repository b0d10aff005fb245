"""Every page opened in headless Chromium: no console errors, charts with a real size, nothing fetched.

The browser is Debian's `chromium` (`.ci/run` installs it), driven by Playwright's Python package from PyPI
with `executable_path`, so `playwright install` (which downloads a browser) is never needed. Without a
browser or without the package the module skips and says which is missing, except under CI (`CI=true`, as
`.ci/run` and GitHub Actions set it): there every test here fails with the reason, so a browser that did not
install cannot turn the page checks into a green run.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpufeed.report.document import load_document, render
from gpufeed.report.html import Page, new_figure


def in_ci() -> bool:
    """True under a CI service: `CI` set to true, 1 or yes (any case)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def find_chromium() -> str | None:
    return shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None)


def missing_browser() -> tuple[str | None, object]:
    """(why the page checks cannot run here, or None; Playwright's sync_api module when it imports)."""
    if find_chromium() is None:
        return "no Chromium on this machine (`apt-get install chromium`; .ci/run installs it)", None
    try:
        return None, importlib.import_module("playwright.sync_api")
    except ImportError as error:
        return f"the playwright package is not installed ({error}): pip install -e '.[test]'", None


CHROMIUM = find_chromium()
MISSING, sync_api = missing_browser()
if MISSING is not None and not in_ci():
    pytest.skip(MISSING, allow_module_level=True)

FIXTURES = Path(__file__).parent / "fixtures"
PAGE_COMMANDS = ("train", "doctor", "bench", "plan", "compare")
# Without the background-networking flags Chromium's own connections are refused by a closed network and
# logged; Playwright's launch() adds --headless and a new, empty --user-data-dir of its own.
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
MIN_CHART_WIDTH, MIN_CHART_HEIGHT = 100, 50  # CSS pixels


@dataclass
class Visit:
    """What the browser saw while it loaded one page."""

    errors: list[str] = field(default_factory=list)  # console messages of type error, and uncaught exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, itself included
    chart_boxes: list[dict | None] = field(default_factory=list)  # bounding box of each `figure.chart svg`
    page_height: int = 0  # the document's full height in CSS pixels


@pytest.fixture(scope="module")
def browser():
    if MISSING is not None:  # only under CI: elsewhere the module skipped
        pytest.fail(f"CI is set and the browser checks cannot run: {MISSING}", pytrace=False)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()


def visit(browser, page_path: Path, screenshot: Path) -> Visit:
    """Open `page_path` from file://, collect errors and requests, measure the charts, take a full-page shot."""
    seen = Visit()
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.on("console", lambda message: seen.errors.append(f"console: {message.text}")
                if message.type == "error" else None)
        page.on("pageerror", lambda error: seen.errors.append(f"page error: {error}"))
        page.on("request", lambda request: seen.requests.append(request.url))
        page.goto(page_path.as_uri(), wait_until="load")
        seen.chart_boxes = [svg.bounding_box() for svg in page.locator("figure.chart svg").all()]
        seen.page_height = page.evaluate("document.documentElement.scrollHeight")
        page.screenshot(path=str(screenshot), full_page=True)
    finally:
        context.close()
    return seen


def problems(seen: Visit, page_text: str) -> list[str]:
    """Everything wrong with a visit; the page is good when this is empty."""
    found = list(seen.errors)
    found += [f"request outside the page: {url}" for url in seen.requests if not url.startswith("file://")]
    for index, box in enumerate(seen.chart_boxes, start=1):
        width, height = (box["width"], box["height"]) if box else (0, 0)  # None: not displayed
        if width <= MIN_CHART_WIDTH or height <= MIN_CHART_HEIGHT:
            found.append(f"chart {index} is {width:.0f} x {height:.0f} px")
    expected = page_text.count('<figure class="chart"')
    if len(seen.chart_boxes) != expected:
        found.append(f"{len(seen.chart_boxes)} charts drawn, {expected} in the file")
    return found


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header (the IHDR chunk right after the signature)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def page_html(command: str) -> str:
    return render(load_document(FIXTURES / f"{command}.json"))


def check_page(browser, text: str, name: str, folder: Path) -> Visit:
    page_path = folder / f"{name}.html"
    page_path.write_text(text, encoding="utf-8")
    screenshot = folder / f"{name}.png"
    seen = visit(browser, page_path, screenshot)
    assert problems(seen, text) == []
    width, height = png_size(screenshot)
    # the whole page, not the window: as tall as the document (±1 px: the layout height is rounded either way)
    assert width == VIEWPORT["width"] and abs(height - max(seen.page_height, VIEWPORT["height"])) <= 1
    return seen


@pytest.mark.parametrize("command", PAGE_COMMANDS)
def test_page_renders_cleanly(browser, command: str, tmp_path: Path) -> None:
    text = page_html(command)
    seen = check_page(browser, text, command, tmp_path)
    assert seen.requests == [(tmp_path / f"{command}.html").as_uri()]  # the page itself and nothing else
    assert seen.chart_boxes, f"the {command} page has no chart"


def test_scaffold_page_with_a_chart_renders_cleanly(browser, tmp_path: Path) -> None:
    about = json.loads((FIXTURES / "train.json").read_text(encoding="utf-8"))["about"]
    page = Page(title="scaffold", about=about)
    page.heading("numbers")
    page.table(["name", "value"], [("steps", 117), ("rate", 1607.85)])
    for index in range(2):  # two charts: their ids must not collide
        figure, axes = new_figure()
        axes.plot([0, 1, 2, 3], [3, 1, 2, index])
        axes.set_xlabel("step")
        page.chart(figure, f"chart {index}")
    seen = check_page(browser, page.render(), "scaffold", tmp_path)
    assert len(seen.chart_boxes) == 2


CONTROL_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>control</title></head><body>
<figure class="chart"><svg viewBox="0 0 10 10" style="width: 40px; height: 40px"><rect width="10" height="10"/></svg>
</figure>
<figure class="chart"><svg viewBox="0 0 10 10" style="width: 600px; height: 300px"><rect width="10" height="10"/></svg>
</figure>
<img src="http://gpufeed.invalid/logo.png" alt="">
<script>console.error("deliberate console error"); console.log("not an error"); missingFunction();</script>
</body></html>
"""


def test_a_broken_page_is_caught(browser, tmp_path: Path) -> None:
    """The negative control: the same checks fail on a page with each fault, so the tests above can fail."""
    page_path = tmp_path / "control.html"
    page_path.write_text(CONTROL_PAGE, encoding="utf-8")
    seen = visit(browser, page_path, tmp_path / "control.png")
    assert "console: deliberate console error" in seen.errors
    assert any(error.startswith("page error:") and "missingFunction" in error for error in seen.errors)
    assert not any("not an error" in error for error in seen.errors)
    found = problems(seen, CONTROL_PAGE)
    assert "request outside the page: http://gpufeed.invalid/logo.png" in found
    assert "chart 1 is 40 x 40 px" in found and not any(line.startswith("chart 2") for line in found)
    assert problems(seen, CONTROL_PAGE + '<figure class="chart"') == found + ["2 charts drawn, 3 in the file"]


def test_long_lines_and_tall_charts_fit_the_screen_and_the_paper(browser, tmp_path: Path) -> None:
    """A long script path in the command and a long traceback line stay inside the page; printed, a heading keeps
    with what follows, a chart is not split, no chart is taller than a sheet, and code wraps instead of being cut."""
    document = load_document(FIXTURES / "doctor.json")
    long_path = "/data/" + "very_long_folder_name/" * 25 + "train.py"
    document["about"]["argv"] = ["gpufeed", "doctor", long_path]
    document["script_error"] = f"FileNotFoundError: {long_path} not found"
    plan = load_document(FIXTURES / "plan.json")
    plan["gpus"] = plan["gpus"] * 3  # a tall chart: one row per GPU
    pages = {"doctor": render(document), "plan": render(plan)}
    context = browser.new_context(viewport=VIEWPORT)
    try:
        for name, text in pages.items():
            path = tmp_path / f"{name}.html"
            path.write_text(text, encoding="utf-8")
            page = context.new_page()
            page.goto(path.as_uri(), wait_until="load")
            assert page.evaluate("document.documentElement.scrollWidth") <= VIEWPORT["width"]  # no sideways scroll
            page.emulate_media(media="print")
            assert page.evaluate("""() => [...document.querySelectorAll('pre')]
                                   .filter(pre => pre.scrollWidth > pre.clientWidth + 1).length""") == 0
            styles = page.evaluate("""() => ({
                headings: [...document.querySelectorAll('h2')].map(h => getComputedStyle(h).breakAfter),
                charts: [...document.querySelectorAll('figure.chart')].map(f => getComputedStyle(f).breakInside),
                heights: [...document.querySelectorAll('figure.chart svg')].map(s => s.getBoundingClientRect().height),
            })""")
            assert set(styles["headings"]) == {"avoid"} and set(styles["charts"]) == {"avoid"}
            assert max(styles["heights"]) <= 20 / 2.54 * 96 + 1, name  # 20 cm at 96 CSS px per inch
            page.close()
    finally:
        context.close()
