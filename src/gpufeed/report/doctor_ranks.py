"""The doctor page's section for a run on several ranks: each rank's means per step, and a timeline with one row
per rank (doctor_page.py draws the rest of the page)."""

from __future__ import annotations

from gpufeed.report.html import PART_COLOURS, Page, new_figure, number
from gpufeed.units import bytes_as


def ranks_section(page: Page, ranks: list[dict], timelines: list[dict]) -> None:
    """Several ranks: each rank's means per step, and a timeline with one row per rank: each watched step as its
    data wait, its compute and the all-reduce it waited for after backward, from the rank's first watched step."""
    page.heading(f"Ranks ({len(ranks)})")
    page.table(["rank", "steps", "step ms", "data wait ms", "compute ms", "all-reduce in flight ms",
                "all-reduce waited ms", "MiB all-reduced", "problem"],
               [(r["rank"], r["steps"], number(r["step_ms"]), number(r["data_wait_ms"]), number(r["compute_ms"]),
                 number(r["collective_ms"]), number(r["exposed_ms"]), number(bytes_as(r["bytes_per_step"], "MiB")),
                 r.get("problem") or "") for r in ranks])
    rows = [t for t in sorted(timelines, key=lambda t: t["rank"]) if t["steps"]]
    if not rows:
        return
    figure, axes = new_figure(9.0, 1.0 + 0.5 * len(rows))
    parts = (("data wait", "data wait (blocked on the next batch)"), ("compute", "compute and other host work"),
             ("all-reduce", "waited on the all-reduce after backward"))
    colours = {"data wait": PART_COLOURS["data wait"], "compute": PART_COLOURS["compute"],
               "all-reduce": PART_COLOURS["stalls"]}
    for row, timeline in enumerate(rows):
        origin = timeline["steps"][0]["start_s"]
        spans = {name: [] for name, _ in parts}
        for step in timeline["steps"]:
            start, wait, exposed = step["start_s"] - origin, step["data_wait_s"], step["exposed_s"]
            spans["data wait"].append((1000.0 * start, 1000.0 * wait))
            spans["compute"].append((1000.0 * (start + wait), 1000.0 * max(0.0, step["wall_s"] - wait - exposed)))
            spans["all-reduce"].append((1000.0 * (start + step["wall_s"] - exposed), 1000.0 * exposed))
        for name, label in parts:
            axes.broken_barh(spans[name], (row - 0.35, 0.7), color=colours[name], label=label if row == 0 else None)
    axes.set_yticks(range(len(rows)), [f"rank {t['rank']}" for t in rows])
    axes.invert_yaxis()
    axes.set_xlabel("ms since the rank's first watched step")
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=3, fontsize="small", frameon=False)
    page.chart(figure, "One row per rank: each watched step split into its data wait, its compute and the "
                       "all-reduce it waited for after backward. A rank the others wait for shows its own work where "
                       "they show all-reduce.")
