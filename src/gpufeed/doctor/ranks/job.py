"""The doctor's torchrun jobs, apart from what they print: the words each rank runs, one job launched, what rank
0 makes of the gathered records, and `--try` on several ranks (every run of the script its own job, told what to
do through files, since a process group is never made twice in one process).

- `rank_words` and `run_job`: `gpufeed doctor WORDS` as N ranks through torch.distributed.run (context.py's
  `launcher_arguments`); the ranks that failed.
- `job_report`: rank 0's report of the job from every rank's record (context.py's `with_ranks`, then diagnose);
  `save_for_launcher` writes it to REPORT_VARIABLE's path, where the launcher's --try reads it back.
- --try: `diagnosis_job` runs the first job and reads its report; `trial_jobs` runs each experiment's pairs of a
  baseline job and a changed job (`JobRunner`, doctor/runs/runner.py's Runner), compared on rank 0's watched steps as in
  one process. Each rank of a changed job reads its part from TRIAL_VARIABLE's file (`trial_from_environment`),
  makes the experiment again from its finding (`trial_experiment`), checks its change took, and rank 0 writes its
  watched steps and the first problem of any rank (`write_trial_result`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from gpufeed.atomic import write_text_atomic
from gpufeed.doctor.findings.diagnose import diagnose, empty_report
from gpufeed.doctor.findings.report import Finding, Report
from gpufeed.doctor.notes import Note
from gpufeed.doctor.ranks.context import launcher_arguments, rank_problems, with_ranks
from gpufeed.doctor.runs.runner import Run
from gpufeed.doctor.runs.script import Script, WatchSettings

TRIAL_VARIABLE = "GPUFEED_DOCTOR_TRIAL"  # a JSON file: {"experiment": null or its kind, name, finding; "result": path}
REPORT_VARIABLE = "GPUFEED_DOCTOR_REPORT"  # rank 0 also writes the report's JSON to this path


@dataclass(frozen=True)
class RankJob:
    """A torchrun job of the doctor: the script, how each rank watches it, the ranks on this machine, and the
    flags each rank's `gpufeed doctor` gets besides (`output_words`: the command line's --json/--html, which rank 0
    writes)."""

    script: Script
    settings: WatchSettings
    nproc_per_node: int
    output_words: tuple[str, ...] = ()


def rank_words(job: RankJob, settings: WatchSettings | None = None, trial: bool = False) -> list[str]:
    """The doctor's options and SCRIPT ARGS for each rank (--nproc-per-node and --try left out); a `trial` run
    profiles nothing and writes no --json or --html (the launcher writes the report)."""
    settings = settings or job.settings
    words = ["--steps", str(settings.steps), "--warmup", str(settings.warmup),
             "--profile-steps", "0" if trial else str(settings.profile_steps), "--timeout", f"{settings.timeout_s:g}"]
    if not trial:
        words += list(job.output_words)
    return words + job.script.words()


def run_job(words: list[str], nproc: int) -> list[int]:
    """One torchrun job of `nproc` ranks running `gpufeed doctor WORDS`; the ranks that failed (none: []).
    OMP_NUM_THREADS, when unset, is set to 1 for the ranks, as torchrun does, but here, so that torchrun's banner
    saying so stays off the doctor's terminal (threads_note says what each rank got); unset again afterwards.
    torch's launcher registers its own handlers for SIGTERM, SIGINT, SIGHUP and SIGQUIT in the calling process
    (elastic/multiprocessing/api.py) and leaves them; they are put back after the job, so that a caller that goes
    on (gpufeed.doctor.run in a notebook or a test) keeps its own Ctrl-C."""
    import signal

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args
    from torch.distributed.run import run as run_ranks

    defaulted = "OMP_NUM_THREADS" not in os.environ
    if defaulted:
        os.environ["OMP_NUM_THREADS"] = "1"  # torch/distributed/run.py's own default for several ranks
    names = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
    saved = {number: signal.getsignal(number) for number in (getattr(signal, name, None) for name in names)
             if number is not None}
    try:
        run_ranks(parse_args(launcher_arguments(words, nproc)))
    except ChildFailedError as failed:
        return sorted(failed.failures)
    finally:
        if defaulted:
            os.environ.pop("OMP_NUM_THREADS", None)
        for number, handler in saved.items():
            if handler is not None:
                signal.signal(number, handler)
    return []


def end_process_group() -> None:
    """Destroy the script's process group, left alive when the doctor stopped the script."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# --- rank 0's report of a job --------------------------------------------------------------------------------


def other_problems(records: list[dict], missing: list[str]) -> list[str]:
    """What went wrong on the ranks other than 0, a line each."""
    return [line for line in rank_problems(records, missing) if not line.startswith("rank 0:")]


@dataclass(frozen=True)
class JobReport:
    """Rank 0's report of a job, and what the terminal shows besides it."""

    report: Report
    watched: bool  # some step was watched (else `report` is empty_report's)
    notes: tuple[Note, ...]  # the Observation's notes, in order
    incomplete: Note | None  # rank 0's own incomplete watch (printed in bold)
    batch_from_loader: bool = False  # rank 0 read the batch size from its loader (else from the model's input)


def job_report(watcher, world_size: int, records: list[dict], missing: list[str], problem: str | None,
               error: str | None) -> JobReport:
    """The report of the job from rank 0's watcher and every rank's record: the ranks' problems as notes, the
    first as the script's error when rank 0's script did not raise."""
    others = other_problems(records, missing)
    incomplete = Note("run", f"watch incomplete: rank 0: {problem}") if problem and error is None else None
    notes = ([incomplete] if incomplete else []) + [Note("run", f"watch incomplete: {line}") for line in others]
    notes.append(threads_note(watcher.threads, world_size))
    seen = with_ranks(watcher.observe(error, notes), world_size, records, missing)
    if error is None and others:
        seen = dataclasses.replace(seen, script_error=others[0])
    report = diagnose(seen) if seen.steps else empty_report(seen)
    report.timeline["ranks"] = [{"rank": r["rank"], "steps": r["steps"]} for r in records]
    return JobReport(report, bool(seen.steps), seen.notes, incomplete, bool(watcher.seen.get("batches")))


def threads_note(threads: int | None, world_size: int) -> Note:
    """What thread count each rank got: torchrun sets OMP_NUM_THREADS=1 when it is unset (with --nproc-per-node,
    run_job sets it first, so torchrun's warning that says so is not printed)."""
    value = os.environ.get("OMP_NUM_THREADS")
    cores = os.cpu_count()
    origin = (f"OMP_NUM_THREADS={value}, which torchrun sets to 1 when it is unset (its warning does not reach "
              f"this terminal)" if value is not None else "OMP_NUM_THREADS unset")
    count = f"{threads} intra-op thread{'' if threads == 1 else 's'}" if threads else "an unknown number of threads"
    return Note("run", f"threads: each rank ran its operators on {count} ({origin}); {world_size} ranks on "
                       f"{cores} cores")


def save_for_launcher(report: Report) -> None:
    """Write the report's JSON where the launcher's --try reads the diagnosis (REPORT_VARIABLE), when it asks."""
    if os.environ.get(REPORT_VARIABLE):
        write_text_atomic(os.environ[REPORT_VARIABLE], json.dumps(report.to_json()))


def write_trial_result(trial: dict, watcher, problem: str | None) -> None:
    """A --try job's result, from rank 0: its watched steps and the first problem of any rank."""
    write_text_atomic(trial["result"], json.dumps(
        {"records": [dataclasses.asdict(record) for record in watcher.records], "problem": problem}))


# --- --try on several ranks ----------------------------------------------------------------------------------


def diagnosis_job(job: RankJob, folder: Path) -> tuple[Report | None, list[int]]:
    """The job that diagnoses (its report printed by rank 0 as usual), its report read back (None when rank 0
    wrote none), and the ranks that failed ([] none)."""
    side = folder / "diagnosis.json"
    os.environ[REPORT_VARIABLE] = str(side)
    try:
        failed = run_job(rank_words(job), job.nproc_per_node)
    finally:
        os.environ.pop(REPORT_VARIABLE, None)
    report = Report.from_json(json.loads(side.read_text())) if side.exists() else None
    return report, failed


def checked_in_the_ranks(watcher, changes, baseline) -> None:
    """The launcher's stand-in for an experiment's check: each rank checked its change took."""
    return None


def trial_jobs(job: RankJob, report: Report, planned: list, folder: Path, repeats: int) -> list:
    """trials/runs.py's trial of each planned experiment, each run of the script its own job."""
    from gpufeed.doctor.trials.runs import run_trial

    runner = JobRunner(job, report, folder)
    return [run_trial(dataclasses.replace(experiment, check=checked_in_the_ranks), job.script, job.settings,
                      repeats, runner) for experiment in planned]


class JobRunner:
    """The Runner of a torchrun job (doctor/runs/runner.py): one job per run, rank 0's watched steps back."""

    def __init__(self, job: RankJob, report: Report, folder: Path):
        self.job, self.report, self.folder, self.runs = job, report, folder, 0

    def __call__(self, script: Script, settings: WatchSettings, experiment=None) -> Run:
        from gpufeed.measure.steps import StepRecord

        self.runs += 1
        spec, result = self.folder / f"trial-{self.runs}.json", self.folder / f"result-{self.runs}.json"
        chosen = None
        if experiment is not None:
            finding = next(f for f in self.report.findings if f.kind == experiment.kind)
            chosen = {"kind": experiment.kind, "name": experiment.name, "device": self.report.verdict.device,
                      "finding": dict(dataclasses.asdict(finding), gain=None)}
        write_text_atomic(spec, json.dumps({"experiment": chosen, "result": str(result)}))
        os.environ[TRIAL_VARIABLE] = str(spec)
        try:
            job = dataclasses.replace(self.job, script=script)
            failed = run_job(rank_words(job, settings, trial=True), job.nproc_per_node)
        finally:
            os.environ.pop(TRIAL_VARIABLE, None)
        if not result.exists():
            return Run([], f"the job failed on rank {', '.join(map(str, failed)) or '?'} before rank 0 wrote its steps")
        outcome = json.loads(result.read_text())
        names = {field.name for field in dataclasses.fields(StepRecord)}
        records = [StepRecord(**{key: value for key, value in record.items() if key in names})
                   for record in outcome["records"]]
        return Run(records, outcome["problem"])


def trial_from_environment() -> dict | None:
    """This rank's part in a --try job (TRIAL_VARIABLE), or None for a diagnosis."""
    path = os.environ.get(TRIAL_VARIABLE)
    return json.loads(open(path, encoding="utf-8").read()) if path else None


def trial_experiment(trial: dict | None):
    """The experiment a --try job's ranks install, made again here from its finding, by name."""
    if not trial or not trial["experiment"]:
        return None
    from gpufeed.doctor.trials.plan import experiments_for

    chosen = trial["experiment"]
    finding = Finding(**chosen["finding"])
    found, _ = experiments_for(finding, chosen["device"].startswith("cuda"))
    return next(experiment for experiment in found if experiment.name == chosen["name"])
