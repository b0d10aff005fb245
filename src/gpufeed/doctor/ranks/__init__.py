"""The doctor on several ranks of a torchrun job: every rank watches the script, rank 0 gathers the records and
writes the one report. On top of the other stages: it runs observe/, diagnoses with findings/, and --try's jobs
use trials/.

- context.py: RankContext (from torchrun's environment), a rank's record, with_ranks, Exchange (the job's store),
  RankGuard (a rank that crashes or hangs)
- timing.py: RankTimer, a rank's DDP forward and all-reduce buckets, timed per step (its optimizer steps: the records')
- job.py: the torchrun jobs without their printing: RankJob, the words each rank runs, run_job, rank 0's
  job_report, and --try's jobs (the diagnosis job, a job per run through JobRunner, a Runner; the files that tell
  the ranks what to do)
- rank.py: one rank's run (run_rank): watched, its record sent; rank 0 gathers and hands the job's report on
"""
