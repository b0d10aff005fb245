"""`gpufeed doctor --nproc-per-node N --try`: every run of the script is its own torchrun job (a process group is
never made twice in one process): the diagnosis, then for each experiment --repeats pairs of a baseline job and a
job whose ranks all install the change (doctor/ranks/job.py: the jobs and the files that tell them what to do);
rank 0's watched steps of each job are compared by trials/runs.py, as in one process. This module prints the plan,
the gains and the notes (cli/doctor_show.py) and says the exit status."""

from __future__ import annotations

from gpufeed.cli.doctor_show import show_gains, show_notes, show_plan
from gpufeed.cli.output import emit_document, error_console


def launch_with_try(args) -> int:
    """The diagnosis job (its report printed by rank 0 as usual), then --repeats pairs of a baseline job and a
    changed job per experiment, compared on rank 0's watched steps (trials/runs.py); the report with the gains."""
    import dataclasses
    import tempfile
    from pathlib import Path

    from gpufeed.doctor.findings import invariants
    from gpufeed.doctor.ranks.job import diagnosis_job, trial_jobs
    from gpufeed.doctor.trials.plan import plan_experiments
    from gpufeed.doctor.trials.runs import with_trials

    with tempfile.TemporaryDirectory(prefix="gpufeed-doctor-") as folder:
        report = diagnosis_job(args, Path(folder))
        if report is None:
            error_console.print("gpufeed doctor --try: not tried, the first run failed; fix that first")
            return 1
        planned, unmeasured = plan_experiments(report)
        show_plan(planned, args.repeats, args.steps, ranks=args.nproc_per_node)
        trials = trial_jobs(args, report, planned, Path(folder))
    findings, notes = with_trials(report, trials, unmeasured)
    report = invariants.checked(dataclasses.replace(report, findings=findings, notes=report.notes + notes))
    if args.json != "-":
        show_gains(report)
        show_notes(notes)
    emit_document(report.to_json(), "doctor", args)
    return 0
