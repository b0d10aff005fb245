"""What `gpufeed doctor` prints, on every path (one process, several ranks, --try): the verdict, the findings
with their fixes and gains, the rates, the tokens and model FLOPs utilisation, the ranks' table and the notes. The
doctor's library returns the Report; this module only turns it into text."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from gpufeed.cli.output import console, error_console
from gpufeed.doctor.findings import KINDS
from gpufeed.doctor.findings.report import (
    gain_headline,
    gained_nothing,
    mfu_sentence,
    rates_sentence,
    tokens_sentence,
    verdict_headline,
)
from gpufeed.units import NA, bytes_as, fixed, percent, size_text


def evidence_value(value, key: str = "") -> str:
    """One evidence value as the terminal shows it: NA for None, a byte count (a key ending in `_bytes`) in MiB or
    GiB, 3 significant digits, settings as arguments."""
    if value is None:
        return NA
    if key.endswith("_bytes") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return size_text(value, gib_digits=2)
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):  # settings by name (evidence.settings): as the user would write them
        return "(" + ", ".join(f"{key}={item!r}" for key, item in value.items()) + ")"
    return str(value)


def carrying_figures(finding) -> dict:
    """The evidence a finding's kind declares as carrying it (its FIGURES, doctor/findings/kind.py), in that order;
    all of it for a kind not in the registry. The rest is in --json and on the page."""
    keys = KINDS[finding.kind].FIGURES if finding.kind in KINDS else tuple(finding.evidence)
    return {key: finding.evidence[key] for key in keys if key in finding.evidence}


def _findings_table(report) -> Table:
    table = Table(title="findings (the figures that carry each; all its evidence: --json or --html)")
    for column in ("kind", "severity", "share", "confidence", "evidence"):
        table.add_column(column, justify="right" if column == "share" else "left")
    for finding in report.findings:
        evidence = ", ".join(f"{key} {evidence_value(value, key)}" for key, value in carrying_figures(finding).items())
        table.add_row(finding.kind, finding.severity, f"{finding.share:.0%}", finding.confidence, Text(evidence))
    return table


def show(report, batch_from_loader: bool, problem: str | None, notes: list, shown=None) -> None:
    """The verdict, the findings with their fixes and gains, the rates and the notes; `shown`, a note already
    printed (the incomplete watch, in bold); `batch_from_loader`: the batch size was read from the loader (else from
    the model's input)."""
    verdict = report.verdict if report is not None else None
    if verdict is not None:
        busy = percent(verdict.device_busy)
        ranks = f" (rank 0 of {verdict.world_size})" if verdict.world_size > 1 else ""
        headline = verdict_headline(report.to_json()) if report is not None else verdict.primary
        console.print(Text(f"verdict: {headline}", style="bold"), Text(
            f"— {verdict.steps} steps on {verdict.device}{ranks}, waiting for data {verdict.data_wait:.0%} of the "
            f"time, device busy {busy}"))
    if problem:
        console.print(Text(f"watch incomplete: {problem}", style="bold red"))
    if report is None:
        show_notes(notes, shown)
        return
    console.print(_findings_table(report))
    for finding in report.findings:
        if finding.fix:
            measured = " (its --try gain: none, see the verdict)" if finding.gain is not None and \
                gained_nothing(finding.gain.to_json()) else ""
            console.print(Text(f"{finding.kind}{measured}: {finding.fix}", style="bold"))
        if finding.snippet:
            console.print(Text("    " + finding.snippet.replace("\n", "\n    ")))
    show_gains(report)
    console.print(Text(f"{rates_sentence(report.to_json())} (batch size from "
                       f"{'the loader' if batch_from_loader else 'the model input'})"))
    tokens, mfu = tokens_sentence(report.to_json()), mfu_sentence(report.to_json())
    if tokens:
        console.print(Text(f"tokens: {tokens}"))
    if mfu:
        console.print(Text(mfu))
    show_notes(report.notes, shown)


def show_gains(report) -> None:
    """Each finding's --try gain in a line, and how it was measured."""
    for finding in report.findings:
        if finding.gain is not None:
            measured = finding.gain.measured is not None
            console.print(Text(f"{'verified' if measured else 'tried'}: {finding.kind}: "
                               f"{gain_headline(finding.gain.to_json())}", style="bold green" if measured else "bold"))
            console.print(Text(f"    how: {finding.gain.how}"))


def show_notes(notes: list, shown=None) -> None:
    """Each note as the page shows it: about the run ("note") or not measured; `shown` is left out."""
    for note in notes:
        if note != shown:
            prefix = "note" if note.kind == "run" else "not measured"
            console.print(Text(f"{prefix}: {note.text}", style="dim"))


def show_ranks(report) -> None:
    """The gathered ranks' means per watched step, one row each (nothing for one process)."""
    if not report.ranks:
        return
    table = Table(title=f"ranks ({report.verdict.world_size}), means per watched step")
    for column in ("rank", "steps", "step ms", "data wait ms", "forward ms", "backward ms", "optimizer ms",
                   "all-reduce in flight ms", "all-reduce waited ms", "MiB all-reduced"):
        table.add_column(column, justify="right")
    for rank in report.ranks:
        table.add_row(str(rank["rank"]), str(rank["steps"]), f"{rank['step_ms']:.1f}", f"{rank['data_wait_ms']:.1f}",
                      f"{rank['forward_ms']:.1f}", f"{rank['backward_ms']:.1f}", f"{rank['optimizer_ms']:.1f}",
                      f"{rank['collective_ms']:.1f}", f"{rank['exposed_ms']:.1f}",
                      fixed(bytes_as(rank["bytes_per_step"], "MiB"), 2, grouped=False))
    console.print(table)


def show_plan(planned: list, repeats: int, steps: int, ranks: int | None = None) -> None:
    """The --try plan in a line on standard error: the experiments, the pairs, the runs (or jobs) to come."""
    from gpufeed.doctor.trials.runs import total_runs

    if not planned:
        return
    count = f"{len(planned)} experiment{'s' if len(planned) > 1 else ''} ({', '.join(e.name for e in planned)})"
    pairs = f"{repeats} pair{'s' if repeats > 1 else ''} each"
    runs = total_runs(len(planned), repeats)
    if ranks is None:
        error_console.print(f"gpufeed doctor --try: {count}, {pairs} of a fresh baseline run and the change: "
                            f"{runs} more runs of the script, {steps} steps each")
    else:
        error_console.print(f"gpufeed doctor --try: {count} on {ranks} ranks, {pairs}: {runs} more jobs, "
                            f"{steps} steps each")
