"""One self-contained HTML page: headings, tables, notes and matplotlib charts inlined as SVG.

No network fetches: no scripts, no style sheets, no fonts and no images from anywhere but the page itself.
Charts are matplotlib `Figure`s (no pyplot, so no global state and no GUI backend) saved as SVG; each one's
ids are prefixed so that several charts in one page cannot collide (matplotlib numbers them from 1 in every
file). The page states its conditions (the document's `about` block) at the top and prints on paper.
"""

from __future__ import annotations

import contextlib
import html
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from gpufeed.atomic import write_text_atomic
from gpufeed.errors import GpufeedError
from gpufeed.units import NA, bytes_text, not_available, plain_number

# Colours for the parts of a step, shared by every page so the same thing has the same colour everywhere.
PART_COLOURS = {"data wait": "#d62728", "host-to-device": "#ff7f0e", "compute": "#2ca02c", "stalls": "#9467bd",
                "other host": "#bbbbbb"}

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto; max-width: 60rem;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; } h2 { font-size: 1.25rem; margin-top: 2rem;
     border-bottom: 1px solid #ddd; } h3 { font-size: 1.05rem; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .25rem .5rem; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; }
figure.chart { margin: 1rem 0; } figure.chart svg { width: 100%; height: auto; max-width: 52rem; display: block; }
figcaption { font-size: .85rem; color: #555; }
pre { background: #f6f6f6; padding: .5rem; overflow-x: auto; font-size: .85rem; }
.conditions { font-size: .85rem; color: #444; background: #fafafa; border: 1px solid #eee; padding: .5rem 1rem; }
.conditions td { overflow-wrap: anywhere; }
.lead { font-size: 1.1rem; }
.sev-high { color: #b00; font-weight: bold; } .sev-medium { color: #b60; } .sev-low, .sev-info { color: #555; }
@media print {
  body { max-width: none; margin: 0; }
  h2, h3 { break-after: avoid; } p + figure.chart { break-before: avoid; }
  figure.chart, table, tr, pre, .conditions { break-inside: avoid; }
  figure.chart svg { max-height: 20cm; }
  thead { display: table-header-group; }
  pre { white-space: pre-wrap; overflow-wrap: anywhere; }
}
"""


def escape(value: object) -> str:
    return html.escape(str(value), quote=True)


def chart_text(value: object) -> str:
    """A string from the document as literal chart text: matplotlib reads text between two `$` as mathtext (a model
    `m$1$` would lose its dollars and turn italic), and `\\$` is its escape for a literal dollar sign."""
    return str(value).replace("$", r"\$")


@contextlib.contextmanager
def chart_style() -> Iterator[None]:
    """Matplotlib's own defaults while a page is drawn, whatever the user's matplotlibrc or the process set: the page
    is a function of the document alone (and `text.usetex` would need LaTeX and read `&` or `%` in labels as TeX)."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({"text.usetex": False, "svg.fonttype": "none"})
        yield


def figure_svg(figure: Figure, prefix: str) -> str:
    """The figure as an inline <svg> element whose ids all start with `prefix`."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix}):
        figure.savefig(buffer, format="svg", bbox_inches="tight",
                       metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = buffer.getvalue()
    text = text[text.index("<svg"):]  # drop the XML declaration and the DOCTYPE (not allowed inline)
    text = re.sub(r'\bid="([^"]+)"', lambda match: f'id="{prefix}-{match.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda match: f"url(#{prefix}-{match.group(1)})", text)
    text = re.sub(r'href="#([^"]+)"', lambda match: f'href="#{prefix}-{match.group(1)}"', text)
    # scale with the page instead of a fixed size in points (the viewBox keeps the proportions)
    text = re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1', text, count=1)
    return text.replace("<svg", '<svg role="img"', 1)


def new_figure(width: float = 8.0, height: float = 3.2, rows: int = 1, columns: int = 1):
    """A Figure and its axes, sized in inches for a page column."""
    figure = Figure(figsize=(width, height), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=rows * columns == 1)
    return figure, axes


def number(value: object, digits: int = 3) -> str:
    """A document's value as a page cell: yes/no, numbers as units.plain_number writes them (NA for None and NaN),
    `NA (reason)` for a reading not taken, settings by name, anything else as its text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None or isinstance(value, (int, float)):
        return plain_number(value, digits)
    if isinstance(value, dict) and "reason" in value:
        return not_available(value["reason"])
    if isinstance(value, dict):  # settings by name (the doctor's evidence.settings)
        return ", ".join(f"{key}={item!r}" for key, item in value.items())
    return str(value)


@dataclass
class Page:
    """A page under construction: add parts in reading order, then `render()`."""

    title: str
    about: dict
    parts: list[str] = field(default_factory=list)
    charts: int = 0

    def heading(self, text: str, level: int = 2) -> None:
        self.parts.append(f"<h{level}>{escape(text)}</h{level}>")

    def paragraph(self, text: str, css: str | None = None) -> None:
        attribute = f' class="{css}"' if css else ""
        self.parts.append(f"<p{attribute}>{escape(text)}</p>")

    def bullets(self, items: Iterable[str]) -> None:
        items = list(items)
        if items:
            self.parts.append("<ul>" + "".join(f"<li>{escape(item)}</li>" for item in items) + "</ul>")

    def code(self, text: str) -> None:
        self.parts.append(f"<pre><code>{escape(text)}</code></pre>")

    def table(self, headers: Sequence[str], rows: Iterable[Sequence[object]], caption: str | None = None,
              classes: Sequence[str | None] | None = None) -> None:
        """Rows of cells; numbers are right-aligned. `classes` gives a CSS class per row (or None)."""
        head = "".join(f"<th>{escape(header)}</th>" for header in headers)
        body = []
        for index, row in enumerate(rows):
            css = classes[index] if classes is not None and classes[index] else None
            cells = "".join(
                f'<td class="num">{escape(number(cell))}</td>' if isinstance(cell, (int, float))
                and not isinstance(cell, bool) else f"<td>{escape(number(cell))}</td>" for cell in row)
            body.append(f'<tr class="{css}">{cells}</tr>' if css else f"<tr>{cells}</tr>")
        title = f"<caption>{escape(caption)}</caption>" if caption else ""
        self.parts.append(f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

    def chart(self, figure: Figure, caption: str) -> None:
        """Inline the figure as SVG with a caption that says what it shows."""
        self.charts += 1
        svg = figure_svg(figure, f"c{self.charts}")
        self.parts.append(f'<figure class="chart" id="chart-{self.charts}">{svg}'
                          f"<figcaption>{escape(caption)}</figcaption></figure>")

    def render(self) -> str:
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f"<title>{escape(self.title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
                f"<h1>{escape(self.title)}</h1>\n{conditions_block(self.about)}\n"
                + "\n".join(self.parts) + "\n</body>\n</html>\n")


def conditions_block(about: dict) -> str:
    """Machine, versions, date and the exact command, from the document's `about` block. A reading the probe could
    not take is a {"reason": ...} dict (a whole section, or one field); it shows as NA with its reason."""
    machine = _section(about.get("machine"))
    software = _section(machine.get("software"))
    argv = about.get("argv")
    rows = [("command", " ".join(str(word) for word in argv) if isinstance(argv, list) else number(argv) if argv
             else NA),
            ("date", number(about.get("created", NA))),
            ("gpufeed", number(about.get("gpufeed", NA)))]
    if _reason(about.get("machine")):
        rows.append(("machine", number(about["machine"])))
    cpu = machine.get("cpu")
    if cpu:
        rows.append(("CPU", number(cpu) if _reason(cpu) else
                     f"{number(cpu.get('model', NA))}, {number(cpu.get('usable_cores'))} usable cores"))
    memory = machine.get("memory")
    if memory:
        total = _section(memory).get("total_bytes", memory)
        rows.append(("RAM", bytes_text(total) if isinstance(total, (int, float)) else number(total)))
    rows.append(("accelerators", _accelerators(machine)))
    versions = [f"{name} {number(software[name])}" for name in ("python", "torch", "numpy", "cuda_runtime", "cudnn")
                if name in software and not isinstance(software[name], dict)]
    not_read = _reason(machine.get("software"))
    rows.append(("versions", ", ".join(versions) or not_available(not_read or None)))
    if software.get("os"):
        rows.append(("system", number(software["os"])))
    items = "".join(f"<tr><th>{escape(key)}</th><td>{escape(value)}</td></tr>" for key, value in rows)
    return f'<section class="conditions"><table>{items}</table></section>'


def _reason(value: object) -> str | None:
    return str(value["reason"]) if isinstance(value, dict) and "reason" in value else None


def _section(value: object) -> dict:
    """A part of the machine block as a dict of readings; {} when absent or not read (a reason)."""
    return value if isinstance(value, dict) and not _reason(value) else {}


def _accelerators(machine: dict) -> str:
    found = machine.get("accelerators")
    if _reason(found):
        return not_available(_reason(found))
    if found:
        return "; ".join(_accelerator(item) for item in found)
    why = [line.split(": ", 1)[1] for line in machine.get("unmeasured") or []
           if isinstance(line, str) and line.startswith("accelerators") and ": " in line]
    return f"none ({'; '.join(why)})" if why else "none" if "accelerators" in machine else NA


def _accelerator(item: object) -> str:
    if not isinstance(item, dict) or _reason(item):
        return number(item)
    memory = item.get("memory_bytes")
    driver = item.get("driver_version")
    text = f"{number(item.get('name'))} ({bytes_text(memory) if isinstance(memory, int) else f'memory {NA}'}"
    return text + (f", driver {driver})" if isinstance(driver, str) else ")")


def write_html(path: str | Path, text: str) -> Path:
    """Write the page atomically; the folder must exist."""
    target = Path(path)
    if not target.parent.exists():
        raise GpufeedError(f"cannot write {path}: folder {target.parent} does not exist; create it first")
    write_text_atomic(target, text)
    return target


def factor(value: float | None) -> str:
    """A ratio such as a speed-up: 106×, 2.06×, 1.5×."""
    return NA if value is None else f"{value:.3g}×"


def stacked_bars(axes, positions: Sequence[float], parts: dict[str, Sequence[float]],
                 labels: dict[str, str] | None = None, widths: Sequence[float] | float = 0.8,
                 align: str = "center") -> list[float]:
    """Bars stacked bottom-up in the order of `parts` (name → heights), coloured by PART_COLOURS; returns the tops."""
    tops = [0.0] * len(positions)
    for name, heights in parts.items():
        axes.bar(positions, heights, widths, bottom=tops, align=align, color=PART_COLOURS.get(name),
                 label=(labels or {}).get(name, name), linewidth=0)
        tops = [top + height for top, height in zip(tops, heights, strict=True)]
    return tops


def plain_log_ticks(axis) -> None:
    """Tick labels on a log-scale axis (`axes.xaxis` or `.yaxis`) as plain numbers, 0.2, 1, 50, not 10^0; the
    minor ticks at 2 and 5 of each decade are labelled too while the axis spans under two decades."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    def minor(value: float, _position) -> str:
        low, high = sorted(axis.get_view_interval())
        return f"{value:,.10g}" if low > 0 and high / low < 100 else ""

    axis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:,.10g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=(2.0, 5.0)))
    axis.set_minor_formatter(FuncFormatter(minor))
