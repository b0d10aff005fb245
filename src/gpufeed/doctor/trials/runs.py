"""Running `--try`'s experiments (changes.py, chosen by plan.py) and comparing them with baseline runs: the
measured gains.

Each run is the script run again in this process (`run_script`: the same argv, working directory and step clock),
watching `steps` steps after `warmup` (or the change's own minimum warm-up, for the baseline too). A run's rate is
samples/s = sum of batch sizes / sum of wall time over its watched steps (steps/s when a batch size was not read in
some run of the experiment; the ratio is the same while the batch is).

Repeats: runs of the same script in one process differ by several percent (the machine, the allocator, the page
cache), so one ratio carries one run's noise. Each experiment runs `repeats` pairs of a fresh baseline run (no
change, the same warm-up) and the changed run, in ABBA order (doctor/runs/pairs.py, as the A/B mode runs its
pairs): baseline, change, change, baseline, ... The gain is the median of the per-pair ratios (changed rate /
baseline rate); its text gives the median, the min–max, the pairs and the steps per run; whether it is real is
measure/difference.py's rule on the range of the ratios (one pair: not judged), as for every paired judgement. A
finding's `gain.measured` is the gain of the change it recommends (an experiment of role "fix"); a bound (role
"bound": the replay) is `gain.bound`, never the headline; the finding's confidence after --try is at most what the
spread of the headline's pairs allows (grading.spread_confidence). The first (diagnosis) run is not reused as a
baseline: it ran cold (first imports, the first CUDA context and kernels, cold file caches), so a ratio against it
would credit the change with the warming up.

Time: after the diagnosis run, 2 x repeats runs per experiment (`total_runs`); with plan.py's
MAX_EXPERIMENTS (3) and the default REPEATS that is 18 more runs of (warm-up + steps) steps each, plus each run's
start-up (about 3 s each for the doctor's defaults on a script at 20 steps/s).

A failing run (the script raises, stalls or ignores the change, in a baseline or a changed run) ends that
experiment with a line in `unmeasured`, never an exception.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpufeed.doctor.findings.grading import lower_confidence, spread_confidence
from gpufeed.doctor.findings.invariants import BEYOND_SHARE, gain_allowed
from gpufeed.doctor.findings.registry import KINDS
from gpufeed.doctor.findings.report import Finding, Gain, Report
from gpufeed.doctor.notes import Note
from gpufeed.doctor.observe.inject import describe_exception, run_script
from gpufeed.doctor.observe.watch import Watcher
from gpufeed.doctor.runs.pairs import run_pairs
from gpufeed.doctor.runs.runner import Run, Runner
from gpufeed.doctor.runs.script import Script, WatchSettings
from gpufeed.doctor.trials.changes import Changes, Experiment
from gpufeed.doctor.trials.plan import plan_experiments
from gpufeed.measure.difference import PairedRatios
from gpufeed.measure.steps import StepRecord

# gpufeed's choice: three pairs give a median and a range; the command's --repeats changes it (1 allowed).
REPEATS = 3


def run_once(script: Script, settings: WatchSettings, experiment: Experiment | None = None) -> Run:
    """The Runner of this process: run the script with `experiment`'s change (none: a baseline run); every patch
    is restored after. Only the watched steps' rates are compared, so the run profiles nothing after them."""
    watcher, changes = Watcher(steps=settings.steps, warmup=settings.warmup, profile_steps=0), Changes()
    try:
        if experiment is not None:
            experiment.install(changes)
        outcome = run_script(script.target, list(script.args), script.is_module, watcher, timeout_s=settings.timeout_s)
    finally:
        changes.restore()
    records = watcher.records
    problem = outcome.problem if outcome.error is not None or outcome.timed_out or not records else None
    return Run(records, problem, watcher, changes)


@dataclass(frozen=True)
class Trial:
    """One experiment's pairs: the gain, or why there is none. `rates`: (baseline, changed) per pair, in `unit`,
    in the order they ran."""

    experiment: Experiment
    gain: Gain | None
    rates: tuple[tuple[float, float], ...] = ()
    unit: str = "samples/s"  # or "steps/s"
    problem: str | None = None

    @property
    def ratios(self) -> list[float]:
        return [changed / baseline for baseline, changed in self.rates]


def _rate(steps: list[StepRecord], samples: bool) -> float:
    amount = sum(record.batch_size for record in steps) if samples else len(steps)
    return amount / sum(record.wall_s for record in steps)


def gain_text(description: str, ratios: list[float], step_counts: list[int], unit: str) -> str:
    """Gain.how: the change, the median ratio with its range, the pairs and the steps behind each run."""
    low, high = min(step_counts), max(step_counts)
    steps = f"{low} steps each" if low == high else f"{low}–{high} steps per run"
    if len(ratios) == 1:
        return f"{description}: 1 pair {ratios[0]:.2f}x, {steps} ({unit} vs a fresh baseline run; one pair, so " \
               f"the ratio carries one run's noise)"
    paired = PairedRatios(tuple(ratios))
    return (f"{description}: median of {len(ratios)} pairs {paired.median:.2f}x "
            f"({paired.low:.2f}–{paired.high:.2f}), {steps} ({unit}, each pair a fresh baseline run and the "
            f"change, in ABBA order)")


def compare(experiment: Experiment, pairs: list[tuple[list[StepRecord], list[StepRecord]]]) -> Trial:
    """The gain over (baseline records, changed records) pairs: the median of the per-pair rate ratios, in
    samples/s when every step of every run has a batch size, else steps/s."""
    runs = [records for pair in pairs for records in pair]
    samples = all(record.batch_size is not None for records in runs for record in records)
    unit = "samples/s" if samples else "steps/s"
    if experiment.samples_only and not samples:
        return Trial(experiment, None, unit=unit, problem="the batch size was not read, so samples/s cannot be "
                                                          "compared")
    rates = tuple((_rate(baseline, samples), _rate(changed, samples)) for baseline, changed in pairs)
    ratios = [changed / baseline for baseline, changed in rates]
    how = gain_text(experiment.description, ratios, [len(records) for records in runs], unit)
    paired = PairedRatios(tuple(ratios))
    gain = Gain(paired.median, how, experiment.description, paired.low, paired.high, len(ratios))
    return Trial(experiment, gain, rates, unit)


def run_trial(experiment: Experiment, script: Script, settings: WatchSettings, repeats: int = REPEATS,
              runner: Runner = run_once) -> Trial:
    """`repeats` pairs of a fresh baseline run and a run with `experiment`'s change, in ABBA order, both with the
    same warm-up (at least the change's own), compared by `compare`. Each pair's change is checked against the
    pair's baseline. The first failing run ends the trial: its reason is the Trial's `problem`, never an exception
    (a KeyboardInterrupt passes through); every patch is restored either way."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    settings = dataclasses.replace(settings, warmup=max(settings.warmup, experiment.min_warmup), profile_steps=0)
    try:
        done = run_pairs(lambda side: runner(script, settings, experiment if side == "new" else None), repeats,
                         check=lambda base, new: experiment.check(new.watcher, new.changes, base.records))
        if done.problem is not None:
            prefix = "the baseline run beside it: " if done.failed == "base" else ""
            return Trial(experiment, None, problem=prefix + done.problem)
        return compare(experiment, [(base.records, new.records) for base, new in done.runs])
    except Exception as error:  # our change or the comparison broke: a line in the report, not a crash
        return Trial(experiment, None, problem=f"the experiment failed: {describe_exception(error)}")


def total_runs(experiments: int, repeats: int) -> int:
    """Runs of the script after the first (diagnosis) run: a baseline and a changed run per pair."""
    return 2 * repeats * experiments


def finding_gain(trials: list[Trial]) -> Gain | None:
    """A finding's gain from its measured trials: `measured`, its range and pairs from the first of role "fix"
    (the change the finding recommends), `bound` from the first of role "bound"; `how` lists every trial's text
    (each states its own factor). None when no trial measured anything."""
    if not trials:
        return None
    fix = next((trial.gain for trial in trials if trial.experiment.role == "fix"), None)
    bound = next((trial.gain.measured for trial in trials if trial.experiment.role == "bound"), None)
    how = "; ".join(trial.gain.how for trial in trials)
    if fix is None:
        return Gain(None, how, bound=bound)
    return dataclasses.replace(fix, how=how, bound=bound)


def tried_confidence(finding: Finding, trials: list[Trial]) -> str:
    """The finding's confidence after --try: the lower of its detection's and the spread of the pairs behind
    its headline gain (the fix's; the bound's when the fix was not measured)."""
    headline = next((trial for trial in trials if trial.experiment.role == "fix"), trials[0])
    return lower_confidence(finding.confidence, spread_confidence(headline.ratios))


def run_experiments(script: Script, baseline: Report, settings: WatchSettings, repeats: int = REPEATS,
                    runner: Runner = run_once) -> tuple[list[Finding], list[Note]]:
    """The findings of `baseline` (the diagnosis run's report), copies with `gain` and `confidence` set where an
    experiment measured something (`finding_gain`, `tried_confidence`), and notes on what was not measured and
    why. `settings` are per run; the diagnosis run's own steps are not used (see the module docstring). `runner`
    runs the script once (this process; several ranks: ranks/job.py's JobRunner)."""
    planned, unmeasured = plan_experiments(baseline)
    trials = [run_trial(experiment, script, settings, repeats, runner) for experiment in planned]
    return with_trials(baseline, trials, unmeasured)


def with_trials(baseline: Report, trials: list[Trial], unmeasured: list[Note]) -> tuple[list[Finding], list[Note]]:
    """The report's findings with their trials' gains, and the notes: `unmeasured` (the plan's) and a line for
    each trial that measured nothing."""
    findings, notes = [], list(unmeasured)
    for finding in baseline.findings:
        own = [trial for trial in trials if trial.experiment.kind == finding.kind]
        notes += [Note("unmeasured", f"verified fix for {finding.kind} ({trial.experiment.name}): {trial.problem}")
                  for trial in own if trial.gain is None]
        measured = [trial for trial in own if trial.gain is not None]
        if measured:
            gain = beyond_share(finding, finding_gain(measured))
            finding = dataclasses.replace(finding, gain=gain, confidence=tried_confidence(finding, measured))
        findings.append(finding)
    return findings, notes


def beyond_share(finding: Finding, gain: Gain) -> Gain:
    """`gain` with a reason in its `how` when it (the fix's or the bound's) is more than removing the finding's
    whole share could give (invariants.gain_allowed: 1 / (1 - share), with its slack): the share counts only the
    time blocked in its part of the step, and the change also sped up the rest, or the pairs are noise."""
    if finding.share <= 0:
        return gain
    allowed = gain_allowed(finding.share)
    over = [(name, value) for name, value in (("the fix", gain.measured), ("the bound", gain.bound))
            if value is not None and value > allowed]
    if not over:
        return gain
    cause = KINDS[finding.kind].BEYOND_SHARE_CAUSE
    said = ", ".join(f"{name} {value:.2f}x" for name, value in over)
    return dataclasses.replace(gain, how=f"{gain.how}; {BEYOND_SHARE}: {said} beside a share of "
                                         f"{finding.share:.0%}, which removed whole gives "
                                         f"{1.0 / (1.0 - finding.share):.2f}x: {cause}")
