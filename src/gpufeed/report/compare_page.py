"""The page of `gpufeed compare --html` (and of the doctor's A/B mode): the headline and gate, what differs
between the runs, the parts of the step side by side as bars, the per-step distributions of both runs, and the
table of every figure, and for a kind with a verdict (the doctor's) both runs' verdicts and what changed in their
findings. A pure function of the saved document (`verdicts`: what its kind says, report/kinds/compare.py)."""

from __future__ import annotations

from gpufeed.report.compare_markdown import judged
from gpufeed.report.html import Page, new_figure, number

BASE_COLOUR, NEW_COLOUR = "#1f77b4", "#ff7f0e"


def compare_page(document: dict, verdicts: bool) -> Page:
    page = Page(f"gpufeed compare: {document['command']}", document["about"])
    page.heading("Result")
    page.paragraph(document["headline"], css="lead")
    if document.get("gate"):
        page.paragraph(document["gate"]["sentence"])
    page.bullets([f"BASE: {document['base']}", f"NEW: {document['new']}"])
    if document["conditions"]:
        page.heading("What differs besides the change")
        page.bullets(document["conditions"])
    parts = [f for f in document["figures"] if f["unit"] == "ms a step" and f["level"] == 0
             and f["key"] != "step" and f["base"] is not None and f["new"] is not None]
    if parts:
        _parts_chart(page, parts)
    spread = document.get("distributions") or {}
    if spread.get("base") and spread.get("new"):
        _distributions(page, spread)
    page.heading("Every figure")
    rows = [(("↳ " if f["level"] else "") + f["name"], f["unit"], f["base"], f["new"], f["difference"],
             "" if f["interval"] is None else f"{number(f['interval'][0])} to {number(f['interval'][1])}",
             judged(f).strip("*")) for f in document["figures"]]
    page.table(["figure", "unit", "BASE", "NEW", "NEW − BASE", "95% interval", "judged"], rows,
               caption=f"judged by: {document['method']}")
    if verdicts:
        both = document["verdicts"]
        page.paragraph(f"Verdict: {both['base'] or 'none'} (BASE), {both['new'] or 'none'} (NEW).")
        changed = [f"{f['kind']}: {f['status']} ({f['base'] or '-'} → {f['new'] or '-'})"
                   for f in document["findings"] if f["status"] != "same"]
        page.bullets(changed)
    if document["notes"]:
        page.heading("Notes")
        page.bullets(document["notes"])
    return page


def _parts_chart(page: Page, parts: list[dict]) -> None:
    figure, axes = new_figure(8.0, 0.5 + 0.45 * len(parts))
    positions = list(range(len(parts)))
    axes.barh([p + 0.2 for p in positions], [f["base"] for f in parts], 0.4, color=BASE_COLOUR, label="BASE")
    axes.barh([p - 0.2 for p in positions], [f["new"] for f in parts], 0.4, color=NEW_COLOUR, label="NEW")
    axes.set_yticks(positions, [f["name"] for f in parts])
    axes.invert_yaxis()
    axes.set_xlabel("ms a step")
    axes.legend(loc="lower right")
    page.chart(figure, "The parts of the step, BASE above NEW: mean milliseconds a step.")


def _distributions(page: Page, spread: dict) -> None:
    figure, axes = new_figure(8.0, 3.0)
    base, new = spread["base"], spread["new"]
    low, high = min(min(base), min(new)), max(max(base), max(new))
    bins = [low + (high - low) * index / 40 for index in range(41)] if high > low else 10
    axes.hist(base, bins=bins, alpha=0.6, color=BASE_COLOUR, label=f"BASE ({len(base)} steps)")
    axes.hist(new, bins=bins, alpha=0.6, color=NEW_COLOUR, label=f"NEW ({len(new)} steps)")
    axes.set_xlabel(spread.get("unit", "ms a step"))
    axes.set_ylabel("steps")
    axes.legend()
    page.chart(figure, "Each run's step times: how far apart the two distributions are, against their spread.")
