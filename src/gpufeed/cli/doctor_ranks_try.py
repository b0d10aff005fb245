"""`gpufeed doctor --nproc-per-node N --try`: every run of the script is its own torchrun job (a process group is
never made twice in one process): the diagnosis, then for each experiment --repeats pairs of a baseline job and a
job whose ranks all install the change (told through TRIAL_VARIABLE's file, each rank checking its change took);
rank 0's watched steps of each job are compared by trials.py, as in one process."""

from __future__ import annotations

from gpufeed.atomic import write_text_atomic
from gpufeed.cli.doctor_ranks import rank_words, run_job
from gpufeed.cli.output import emit_document, error_console

# --try with several ranks: each run of the script is its own torchrun job, told what to do through files
TRIAL_VARIABLE = "GPUFEED_DOCTOR_TRIAL"  # a JSON file: {"experiment": null or its kind, name, finding; "result": path}
REPORT_VARIABLE = "GPUFEED_DOCTOR_REPORT"  # rank 0 also writes the report's JSON to this path


def launch_with_try(args) -> int:
    """The diagnosis job (its report printed by rank 0 as usual), then --repeats pairs of a baseline job and a
    changed job per experiment, compared on rank 0's watched steps (trials.py); the report with the gains."""
    import dataclasses
    import json
    import os
    import tempfile
    from pathlib import Path

    from gpufeed.cli.doctor import _show_gains, _show_notes
    from gpufeed.doctor.experiments import plan_experiments
    from gpufeed.doctor.report import Report
    from gpufeed.doctor.trials import run_trial, total_runs, with_trials

    with tempfile.TemporaryDirectory(prefix="gpufeed-doctor-") as folder:
        side = Path(folder) / "diagnosis.json"
        os.environ[REPORT_VARIABLE] = str(side)
        try:
            failed = run_job(rank_words(args), args.nproc_per_node)
        finally:
            os.environ.pop(REPORT_VARIABLE, None)
        if failed or not side.exists():
            error_console.print("gpufeed doctor --try: not tried, the first run failed; fix that first")
            return 1
        report = Report.from_json(json.loads(side.read_text()))
        planned, unmeasured = plan_experiments(report)
        if planned:
            error_console.print(f"gpufeed doctor --try: {len(planned)} experiment{'s' if len(planned) > 1 else ''} "
                                f"({', '.join(e.name for e in planned)}) on {args.nproc_per_node} ranks, "
                                f"{args.repeats} pair{'s' if args.repeats > 1 else ''} each: "
                                f"{total_runs(len(planned), args.repeats)} more jobs, {args.steps} steps each")
        runner = JobRunner(args, report, Path(folder))
        trials = [run_trial(dataclasses.replace(experiment, check=_checked_in_the_ranks), args.command[0],
                            args.command[1:], args.module, args.steps, args.warmup, args.timeout, args.repeats,
                            runner) for experiment in planned]
    findings, notes = with_trials(report, trials, unmeasured)
    report = dataclasses.replace(report, findings=findings, notes=report.notes + notes)
    if args.json != "-":
        _show_gains(report)
        _show_notes(notes)
    emit_document(report.to_json(), "doctor", args)
    return 0


def _checked_in_the_ranks(watcher, changes, baseline) -> None:
    """The launcher's stand-in for an experiment's check: each rank checked its change took (`_trial_problem`)."""
    return None


class JobRunner:
    """trials.run_trial's Runner for several ranks: one torchrun job per run, rank 0's watched steps back."""

    def __init__(self, args, report, folder):
        self.args, self.report, self.folder, self.runs = args, report, folder, 0

    def __call__(self, target, script_args, is_module, experiment, steps, warmup, timeout_s):
        import dataclasses
        import json
        import os

        from gpufeed.doctor.trials import Run
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
            failed = run_job(rank_words(self.args, steps, warmup, trial=True), self.args.nproc_per_node)
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
    import json
    import os

    path = os.environ.get(TRIAL_VARIABLE)
    return json.loads(open(path, encoding="utf-8").read()) if path else None


def trial_experiment(trial: dict | None):
    """The experiment a --try job's ranks install, made again here from its finding, by name."""
    if not trial or not trial["experiment"]:
        return None
    from gpufeed.doctor.findings import BY_KIND
    from gpufeed.doctor.report import Finding

    chosen = trial["experiment"]
    finding = Finding(**chosen["finding"])
    found, _ = BY_KIND[chosen["kind"]].experiments(finding, chosen["device"].startswith("cuda"))
    return next(experiment for experiment in found if experiment.name == chosen["name"])
