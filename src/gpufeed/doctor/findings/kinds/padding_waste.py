"""padding_waste: the model computes on padding: batches of token ids padded to a fixed length far beyond their
longest row.

Its share is measured, not assumed from the count of padded positions (attention's cost grows faster than the
positions, an MLP's in proportion, the optimizer's not at all): after the watch, observe/padding.py times a forward
and backward of the step's model on a watched batch as it came and on the same rows cut to the span of columns that
hold a real token in some row (`Observation.padding.trial`: the fastest of interleaved rounds each). The fraction
of the trial's forward and backward that cutting saved, applied to the watched steps' forward and backward
(`model_work_s`), over the watched step time, is the share a batch padded to its longest row recovers: the
fraction, not the trial's milliseconds, because its two widths ran interleaved and their ratio holds when the
machine was faster or busier after the watch than during it (a trial 10% faster than the watched steps, the
milliseconds saved over the step would under-state the share, and `--try`'s measured gain would exceed it). So a
trial slower than grading.DRIFT times the slowest watched step's forward and backward (another process's burst
after the watch) is still used, with a note; the batch probe's is not (small_batch reads its milliseconds). On the
CPU, a trial whose runs waited for cores is timed again on one thread, in that thread's CPU time (observe/padding.py:
`trial_threads` 1 in the evidence, "on one thread" in the fix): its ratio is the work's, its milliseconds one
thread's, so they are not held against the watched steps.

The level (RECOMMEND_AT): the fix changes nothing the training computes (padding is masked out of attention and of
the loss: a batch cut to its longest row gives its real tokens the same losses and gradients) and is a line in the
script, like a loader's fix; so the level of the other fixes that leave the training as it is, the input share's
medium grade (5%, grading.py's source). Graded as shares are (grading.severity).

Evidence: the padding's share of the positions (`padding_share`) and what cutting each batch to its longest row
removes (`trimmable_share`), counted on every training batch; the widths the batches came in and the rows'
lengths (`shortest`, `median_length`, `longest`); where the padding is made (`source`, `padding_site`: the
tokenizer's padding="max_length" at the user's line, a collator, a collate function, the loop's own batches); the
trial (`rows`, `width`, `kept_width`, `as_came_ms`, `cut_ms`, `saved_ms_per_batch`, `rounds`, `trial_threads`
when timed on one thread; an encoder-decoder's `decoder_width`, `decoder_kept_width`). The fix is
frameworks/words.py's `shorter_padding`, in the framework's words. --try: cut_padding, every training batch cut to
its longest row (trials/changes.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import CutPadding, Declared
from gpufeed.doctor.findings.grading import (
    DRIFT,
    INPUT_SHARE_MEDIUM,
    confidence,
    new_finding,
    severity,
    watched_model_s,
)
from gpufeed.doctor.findings.kind import Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

SUBJECT = "padding trial"


class PaddingWaste(Kind):
    NAME = "padding_waste"
    MEANING = "the model computes on padding: token batches padded far beyond their longest row"
    PART = "busy"  # shares.py: arithmetic on padded positions is the model's own work, done for nothing
    RECOMMEND_AT = INPUT_SHARE_MEDIUM
    RECOMMEND_SOURCE = ("gpufeed's argument: cutting padding changes nothing the training computes (padding is "
                        "masked out of attention and the loss), like a loader fix; so the level of those fixes, the "
                        "input share's medium grade (5%, the TensorFlow profiler's)")
    FIGURES = ("padding_share", "trimmable_share", "saved_ms_per_batch")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        reading = seen.padding
        if reading is None or reading.trial is None:
            return None
        trial = reading.trial
        _, batches = seen.model_batch()
        batches = batches or 1
        parts = watched_model_s(seen, batches)
        if parts and trial.threads is None and trial.seconds > DRIFT * max(parts):
            notes.run(f"{SUBJECT} slower than the watch: its fastest forward and backward of the batch as it came "
                      f"took {1000.0 * trial.seconds:.3g} ms, more than {DRIFT:g}x the slowest watched step's "
                      f"{1000.0 * max(parts):.3g} ms (the machine busier after the watch); the share takes the "
                      f"fraction the cut saved, as its two widths ran interleaved, not its milliseconds")
        totals = seen.totals
        saved_s = max(0.0, trial.seconds - trial.trimmed_seconds)
        share = totals.share(saved_s / trial.seconds * model_work_s(seen))
        evidence = {"padding_share": reading.padding_share, "trimmable_share": reading.trimmable_share,
                    "widths": list(reading.widths), "shortest": reading.shortest,
                    "median_length": reading.median_length, "longest": reading.longest,
                    "source": reading.source, "padding_site": reading.site, "rows": trial.rows,
                    "width": trial.width, "kept_width": trial.kept, "as_came_ms": 1000.0 * trial.seconds,
                    "cut_ms": 1000.0 * trial.trimmed_seconds, "saved_ms_per_batch": 1000.0 * saved_s,
                    "rounds": trial.rounds, "framework": seen.setup.framework}
        if trial.threads is not None:
            evidence["trial_threads"] = trial.threads
        if trial.decoder_width is not None:
            evidence.update({"decoder_width": trial.decoder_width, "decoder_kept_width": trial.decoder_kept})
        if batches > 1:
            evidence["batches_per_step"] = batches
        if round(share, 2) <= 0:
            notes.run(f"padding: {reading.padding_share:.0%} of the positions are padding, but cutting a watched "
                      f"batch to its longest row measured no time saved ({1000.0 * trial.seconds:.3g} ms as it "
                      f"came, {1000.0 * trial.trimmed_seconds:.3g} ms cut)")
            return None
        words.explain(seen.setup, notes, site=False)
        supporting = totals.steps if trial.rounds >= 3 else 0
        return new_finding(self.NAME, severity(share), share, evidence, fix(evidence, seen), confidence(supporting))

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """Every training batch cut to its longest row (trials/changes.py), the fix's effect without editing."""
        return [CutPadding()], None


def model_work_s(seen: Observation) -> float:
    """The watched steps' forward and backward, summed (the work the trial times a batch of); the steps' whole
    time less their input and the optimizer step where the steps do not carry both."""
    timed = [r.forward_s + r.backward_s for r in seen.steps if r.forward_s is not None and r.backward_s is not None]
    if len(timed) == len(seen.steps):
        return sum(timed)
    totals = seen.totals
    return totals.wall_s - totals.input_s - sum(r.optimizer_s or 0.0 for r in seen.steps)


def fix(evidence: dict, seen: Observation) -> tuple[str, str]:
    """What was measured, then the change in the framework's words (frameworks/words.py)."""
    seq2seq = evidence.get("decoder_width") is not None
    widths = evidence["widths"]
    padded_to = f"{widths[0]} positions" if len(widths) == 1 else f"{widths[0]}-{widths[-1]} positions"
    at = f" at {evidence['padding_site']}" if evidence["padding_site"] else ""
    alone = " on one thread, in its CPU time (other processes held the cores)" \
        if evidence.get("trial_threads") == 1 else ""
    measured = (f"{evidence['padding_share']:.0%} of the positions the model computes on are padding: batches "
                f"padded to {padded_to} whose rows hold {evidence['shortest']}-{evidence['longest']} real tokens "
                f"(median {evidence['median_length']:.0f}), padded by {evidence['source']}{at}. Cut to its longest "
                f"row ({evidence['kept_width']} of {evidence['width']} positions), a watched batch's forward and "
                f"backward took {evidence['cut_ms']:.3g} ms instead of {evidence['as_came_ms']:.3g} ms{alone}. ")
    change, snippet = words.shorter_padding(seen.setup, evidence["source"], evidence["padding_site"], seq2seq)
    return measured + change, snippet
