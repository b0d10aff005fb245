"""The short Markdown summary of a comparison (`--markdown`), fit for a pull-request comment: the headline, the
gate's sentence, what differs between the runs, and a table of the figures. A pure function of the document."""

from __future__ import annotations

from gpufeed.units import NA

SHARES = ("of the time", "of the samples")  # figures that are fractions, shown as percentages


def cell(value: float | None, unit: str) -> str:
    """A figure's value as the table shows it: shares as percentages, else 3 significant digits."""
    if value is None:
        return NA
    if unit in SHARES:
        return f"{value:.1%}"
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def judged(figure: dict) -> str:
    """The figure's verdict in a word or two: worse, better, no change (its interval holds 0), no change (under
    1%) (told apart from 0 but not clear of MIN_CHANGE, 1% of BASE's step or of the figure: measure/difference.py's
    rule), not judged (no interval: one value a run, or a run without per-step samples)."""
    if figure["real"] is None:
        return "not judged"
    if not figure["real"]:
        interval = figure["interval"]
        if interval and (interval[0] > 0 or interval[1] < 0):  # told apart, but not clear of MIN_CHANGE
            return "no change (under 1%)"
        return "no change"
    worse = figure["difference"] > 0 if figure["lower_is_better"] else figure["difference"] < 0
    return "**worse**" if worse else "better"


def markdown(document: dict) -> str:
    lines = [f"### gpufeed compare ({document['command']})", "", f"**{document['headline']}**", ""]
    gate = document.get("gate")
    if gate:
        lines += [("❌ " if gate["failed"] else "✅ ") + gate["sentence"], ""]
    lines += [f"- BASE: `{document['base']}`", f"- NEW: `{document['new']}`"]
    lines += [f"- differs: {line}" for line in document["conditions"]]
    lines += ["", "| figure | unit | BASE | NEW | NEW − BASE | 95% interval | |", "|---|---|--:|--:|--:|--:|---|"]
    for figure in document["figures"]:
        unit, interval, difference = figure["unit"], figure["interval"], figure["difference"]
        name = ("↳ " if figure["level"] else "") + figure["name"]
        lines.append(f"| {name} | {unit} | {cell(figure['base'], unit)} | {cell(figure['new'], unit)} | "
                     f"{NA if difference is None else f'{difference:+,.3g}'} | "
                     f"{'' if interval is None else f'{interval[0]:+,.3g} to {interval[1]:+,.3g}'} | "
                     f"{judged(figure)} |")
    lines += ["", f"Judged by: {document['method']}."]
    lines += [f"Note: {note}" for note in document["notes"]]
    return "\n".join(lines) + "\n"
