"""The doctor's report, in the shape docs/design.md documents: a verdict, findings with evidence and fixes, and
typed notes (about the run, or what could not be measured). `to_json` gives exactly the documented JSON.

The kinds a finding may have are the registered ones (registry.py's `KINDS`, docs/design.md's "The doctor's
vocabulary"); the verdict's line takes a kind's own words from it (`Kind.verdict_words`, `verdict_addendum`:
kind.py) without naming any. The notes are doctor/notes.py's.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.notes import Note
from gpufeed.measure.difference import MIN_CHANGE, WORDS, judged_ratios
from gpufeed.units import flops_text

SEVERITIES = ("high", "medium", "low", "info")
MFU_KEYS = ("mfu", "mfu_peak_flops_per_s", "mfu_precision", "flops_per_token", "rule_flops_per_token", "flops_rule",
            "mfu_missing")  # the report's model FLOPs utilisation (diagnose.py `utilisation`)
# mfu_missing's words for a loop that is not a language model's (no sentence is shown for it)
NO_TOKEN_IDS = "no token ids in the batches (MFU is reported for language-model training)"


@dataclass(frozen=True)
class Gain:
    """What `--try` measured for one finding, as speed-up factors (samples/s with the change ÷ without).

    `measured` is the gain of the change the finding recommends (`change`, in words), the median of its pairs,
    with their range (`low`, `high`) and count; None when that fix has no experiment or its experiment failed
    (a note says which). `bound` is an upper bound that is not a change to make: for input_bound, the replay of
    batches from memory ("if input were free"); None when there is none. `how` is every trial's text."""

    measured: float | None
    how: str
    change: str | None = None
    low: float | None = None
    high: float | None = None
    pairs: int = 0
    bound: float | None = None

    def to_json(self) -> dict:
        return {"measured": self.measured, "change": self.change,
                "range": None if self.low is None else [self.low, self.high], "pairs": self.pairs,
                "bound": self.bound, "how": self.how}


def gain_headline(gain: dict) -> str:
    """A finding's JSON `gain` in a line, the recommended fix first: "DataLoader(num_workers=2, ...): 2.07x
    (2.05–2.07 over 3 pairs); if input were free (the bound, not a fix): 82.46x". A fix not measured says so; one
    whose pairs measure/difference.py does not call real says "not told apart from no change"."""
    measured, spread, pairs = gain.get("measured"), gain.get("range"), gain.get("pairs") or 0
    if measured is None:
        parts = ["the recommended fix was not measured (why: under \"not measured\")"]
    else:
        real = judged_ratios(spread[0], spread[1], pairs) if spread else None
        # a range not judged real that would print as clear of the 1% band gets the digit that shows why
        digits = 3 if real is False and (round(spread[0], 2) >= 1.0 + MIN_CHANGE or
                                         round(spread[1], 2) <= 1.0 - MIN_CHANGE) else 2
        detail = (f" ({spread[0]:.{digits}f}–{spread[1]:.{digits}f} over {pairs} pairs)" if spread and pairs > 1
                  else " (1 pair)" if pairs == 1 else "")
        if real is False:
            detail += f", {WORDS[False]}"
        elif real and measured < 1.0:
            detail += ", slower"
        parts = [f"{gain.get('change') or 'the change'}: {measured:.2f}x{detail}"]
    if gain.get("bound") is not None:
        parts.append(f"if input were free (the bound, not a fix): {gain['bound']:.2f}x")
    return "; ".join(parts)


def verdict_headline(document: dict) -> str:
    """The verdict in a line, with the share it rests on: "input_bound: 24% of the step (high); near-tie with
    sync_stall"; when --try measured the verdict's fix and it gained nothing real, that and the next remedy. A
    report without a verdict says so."""
    verdict = document["verdict"]
    if verdict.get("primary") is None:
        return "no verdict: no training step was watched"
    primary = verdict["primary"]
    finding = next((f for f in document.get("findings", ()) if f["kind"] == primary), {})
    share = verdict.get("share", finding.get("share"))  # a report saved before verdict.share: its finding's
    kind = KINDS.get(primary)
    rests = kind.verdict_words(share, finding) if kind is not None else None
    if rests is None:
        rests = f"{share:.0%} of the step" if share is not None else "share not computed"
        rests += f" ({finding['severity']})" if finding.get("severity") else ""
    tied = verdict.get("tied_with") or []
    line = f"{primary}: {rests}" + (f"; near-tie with {', '.join(tied)}" if tied else "")
    line += _fix_without_gain(finding.get("gain"), kind.next_remedy(finding) if kind is not None else None)
    for each in document.get("findings", ()):  # what a kind says beside any verdict (worker_memory: the RAM)
        beside = KINDS.get(each["kind"])
        line += beside.verdict_addendum(each) if beside is not None else ""
    return line


def gained_nothing(gain: dict | None) -> bool:
    """--try measured the recommended fix (a finding's saved `gain`) and its pairs show no real gain
    (measure/difference.py's rule: not told apart from no change, or a real loss); False when not tried, not
    measured, judged on one pair (not judged) or a real gain."""
    if not gain or gain.get("measured") is None or not gain.get("range"):
        return False
    real = judged_ratios(gain["range"][0], gain["range"][1], gain.get("pairs") or 0)
    return real is False or (real is True and gain["measured"] < 1.0)


def _fix_without_gain(gain: dict | None, next_remedy: str | None) -> str:
    """What the verdict's line adds when the verdict's fix gained nothing (`gained_nothing`): that fix is then not
    the headline's advice, and the kind's next remedy is named (or that none is)."""
    if not gained_nothing(gain):
        return ""
    how = "slower" if judged_ratios(gain["range"][0], gain["range"][1], gain["pairs"]) else WORDS[False]
    said = (f"; its fix measured no gain ({gain.get('change') or 'the change'}: {gain['measured']:.2f}x over "
            f"{gain['pairs']} pairs, {how})")
    return said + (f": next, {next_remedy}" if next_remedy else ": no other remedy is named here")


def tokens_sentence(document: dict) -> str | None:
    """The token rates in words, for batches of token ids: "the model computes 12,300 token positions/s fed
    instantly, of which 8,200/s real tokens (33% of the positions padding)", and the rate over the whole step (the
    one gpufeed compare shows) where the input took more than MIN_CHANGE of it; None when no tokens were counted."""
    model, real = document.get("model_tokens_per_s"), document.get("real_tokens_per_s")
    if not model:
        return None
    line = f"the model computes {model:,.0f} token positions/s fed instantly"
    if real is None:
        line += " (padding not told apart: no attention_mask and no pad_token_id)"
    else:
        line += f", of which {real:,.0f}/s real tokens ({1.0 - real / model:.0%} of the positions padding)"
    steps = (document.get("timeline") or {}).get("steps") or []
    if steps and all(step.get("tokens") is not None for step in steps):
        whole = sum(step["tokens"] for step in steps) / sum(step["wall_s"] for step in steps)
        if whole < (1.0 - MIN_CHANGE) * model:  # the input took part of the step (gpufeed compare's rate)
            line += f"; {whole:,.0f} token positions/s over the whole step, its input included"
    return line


def mfu_sentence(document: dict) -> str | None:
    """Model FLOPs utilisation in words (findings/diagnose.py's definitions): "MFU 31% of the NVIDIA H200's bf16
    dense peak 989 TFLOP/s (1.2 GFLOP per token counted; 6N+12Lhs rule 1.1 GFLOP)", under 1% to 2 significant
    digits ("MFU 0.11% ..."); "MFU not computed: the
    device's bf16 peak is unknown (...)" with the reason; None when the batches held no token ids (a report saved
    before these keys, or a loop that is not a language model's)."""
    mfu, missing = document.get("mfu"), document.get("mfu_missing")
    if mfu is None and missing in (None, NO_TOKEN_IDS):
        return None
    if mfu is not None:
        device = document["verdict"].get("device") or "device"  # "cuda:0 (NVIDIA H200)", "cpu"
        name = "CPU" if device == "cpu" else device.partition(" (")[2].removesuffix(")") or device
        share = f"{mfu:.0%}" if mfu >= 0.01 else f"{100 * mfu:.2g}%"  # a tiny model's 0.1%, not 0%
        line = (f"MFU {share} of the {name}'s {document.get('mfu_precision')} dense peak "
                f"{flops_text(document.get('mfu_peak_flops_per_s'), 'FLOP/s')}")
    else:
        line = f"MFU not computed: {missing}"
    per_token, rule = document.get("flops_per_token"), document.get("rule_flops_per_token")
    parts = [f"{flops_text(per_token)} per token counted"] if per_token is not None else []
    if rule is not None:
        terms = document.get("flops_rule")
        parts.append(f"{terms} rule {flops_text(rule)}" + ("" if terms == "6N+12Lhs" else
                                                           ", attention left out: no L and h in a model config"))
    return line + (f" ({'; '.join(parts)})" if parts else "")


def rates_sentence(document: dict) -> str:
    """The loader's rate against the model's in words, as they compare for the loader's workers: without workers
    the loader runs in series with the model (its time adds to the step), so it never "keeps up"; nor does a loop
    that builds its own batches (its steps' `loop_input_s`); with background workers its delivered rate is compared
    with what the model consumes fed instantly."""
    loader, model = document.get("loader_samples_per_s"), document.get("model_samples_per_s")
    wait = document["verdict"].get("data_wait")
    workers = document.get("loader_workers")
    if "loader_workers" not in document:  # a report saved before the key: the evidence that held it, if any
        workers = next((f["evidence"].get("loader_workers") for f in document.get("findings", ())
                        if "loader_workers" in _old_report_keys(f["kind"])), None)
    if model is None or model <= 0:
        return "Samples per second were not computed (the batch size was not read)."
    fed = f"the model consumes {model:,.0f} samples/s when fed instantly"
    own = loop_built(document)
    if workers == 0 or own:
        who, it = (("The loop builds its batches itself (no DataLoader), so its reading", "the reading") if own
                   else ("The loader has no workers, so it", "the loader"))
        if loader is None or loader <= 0:
            return f"{who} runs in series with the model, inside the step: it took {wait:.0%} of the step; {fed}."
        loop = 1.0 / (1.0 / loader + 1.0 / model)
        return (f"{who} runs in series with the model: it makes {loader:,.0f} samples/s while it runs and {fed}; "
                f"in series they give {loop:,.0f} samples/s, {it} taking {wait:.0%} of the step.")
    if loader is None or loader <= 0:
        return (f"The steps waited {wait:.0%} of their time for data, so the loader keeps up: it is at least as "
                f"fast as the model, which consumes {model:,.0f} samples/s when fed instantly.")
    gap = (f"the model could consume {model / loader:.2f}x what the loader supplies" if model > loader
           else f"the loader supplies {loader / model:.2f}x what the model consumes: it keeps up")
    return f"The loader supplies {loader:,.0f} samples/s; {fed}: {gap}."


def loop_built(document: dict) -> bool:
    """The saved run's loop built its own batches (no DataLoader): some watched step spent time doing it."""
    steps = (document.get("timeline") or {}).get("steps") or ()
    return any((step.get("loop_input_s") or 0.0) > 0 for step in steps)


def _old_report_keys(name: str) -> tuple[str, ...]:
    """The report keys a document saved before them kept in this kind's evidence (none for an unknown kind)."""
    kind = KINDS.get(name)
    return kind.OLD_REPORT_KEYS if kind is not None else ()


@dataclass(frozen=True)
class Finding:
    kind: str  # a registered kind's name (registry.py)
    severity: str  # one of SEVERITIES
    share: float  # fraction of step time this finding accounts for
    evidence: dict  # the numbers behind it
    fix: str  # in words
    snippet: str  # as code
    gain: Gain | None
    confidence: str  # "high" | "medium" | "low"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")


@dataclass(frozen=True)
class Verdict:
    primary: str | None  # a registered kind's name; None when no step was watched
    device_busy: float | None  # fraction of wall time the device computed; None when not measurable
    data_wait: float | None  # fraction of wall time getting the input: waiting for batches, or the loop building
    # its own (StepRecord.input_s); None when no step was watched
    steps: int
    device: str
    world_size: int = 1  # ranks of the run (the watched steps and findings above them are rank 0's)
    share: float | None = None  # the verdict's finding's share of the step, what the verdict rests on
    tied_with: list[str] = field(default_factory=list)  # kinds over their level whose shares' intervals overlap


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    findings: list[Finding]
    notes: list[Note] = field(default_factory=list)
    loader_samples_per_s: float | None = None  # what the input pipeline can supply
    model_samples_per_s: float | None = None  # what the model consumes when fed instantly
    script_error: str | None = None  # the script's exception, one line, when it raised
    # what the report was made from, for the page's timeline (an addition to verdict, findings, unmeasured):
    # {"steps": [StepRecord fields...], "samples": [HostSample fields...], "profile": [one dict per profiled step]}
    timeline: dict = field(default_factory=lambda: {"steps": [], "samples": []})
    # with several ranks: one RankSummary per gathered rank (doctor/observation.py), as dicts, by rank
    ranks: list[dict] = field(default_factory=list)
    loader_workers: int | None = None  # the training DataLoader's num_workers (None: not read): how the rates compare
    model_tokens_per_s: float | None = None  # token positions (padding included) the model consumes fed instantly
    real_tokens_per_s: float | None = None  # of which real tokens, not padding (None: not told apart, or no tokens)
    # model FLOPs utilisation, for token batches (diagnose.py's definitions; None: not computed, mfu_missing says why)
    mfu: float | None = None  # counted FLOPs per step x steps / watched wall seconds / the peak below
    mfu_peak_flops_per_s: float | None = None  # the device's dense peak in mfu_precision
    mfu_precision: str | None = None  # the precision that did most of the counted FLOPs
    flops_per_token: float | None = None  # counted FLOPs per step / the counted step's token positions
    rule_flops_per_token: int | None = None  # 6N + 12·L·h·s of the step's model (measure/transformer_flops.py)
    flops_rule: str | None = None  # its terms: "6N+12Lhs", or "6N" without L and h in a model config
    mfu_missing: str | None = None  # why mfu is None

    @property
    def unmeasured(self) -> list[str]:
        """Every note's text, in order: the JSON's `unmeasured` list."""
        return [note.text for note in self.notes]

    @classmethod
    def from_json(cls, document: dict) -> Report:
        """The report a `to_json` document holds (a saved one's extra keys, such as `about`, are left out); the
        findings' gains are read back as measured, change, range, pairs, bound and how."""
        def gain(value: dict | None) -> Gain | None:
            if not value:
                return None
            low, high = value.get("range") or (None, None)
            return Gain(value.get("measured"), value.get("how", ""), value.get("change"), low, high,
                        value.get("pairs") or 0, value.get("bound"))

        fields = {field.name for field in dataclasses.fields(Verdict)}
        run = set(document.get("notes") or [])
        return cls(Verdict(**{key: value for key, value in document["verdict"].items() if key in fields}),
                   [Finding(**dict(finding, gain=gain(finding.get("gain")))) for finding in document["findings"]],
                   [Note("run" if text in run else "unmeasured", text) for text in document.get("unmeasured", [])],
                   document.get("loader_samples_per_s"), document.get("model_samples_per_s"),
                   document.get("script_error"), copy.deepcopy(document.get("timeline") or {}),
                   copy.deepcopy(document.get("ranks") or []), document.get("loader_workers"),
                   document.get("model_tokens_per_s"), document.get("real_tokens_per_s"),
                   **{key: document.get(key) for key in MFU_KEYS})

    def to_json(self) -> dict:
        findings = [dict(dataclasses.asdict(finding), gain=finding.gain and finding.gain.to_json())
                    for finding in self.findings]
        return {"verdict": dataclasses.asdict(self.verdict), "findings": findings, "unmeasured": self.unmeasured,
                "notes": [note.text for note in self.notes if note.kind == "run"],
                "loader_samples_per_s": self.loader_samples_per_s, "model_samples_per_s": self.model_samples_per_s,
                "script_error": self.script_error, "timeline": copy.deepcopy(self.timeline),
                "ranks": copy.deepcopy(self.ranks), "loader_workers": self.loader_workers,
                "model_tokens_per_s": self.model_tokens_per_s, "real_tokens_per_s": self.real_tokens_per_s,
                **{key: getattr(self, key) for key in MFU_KEYS}}
