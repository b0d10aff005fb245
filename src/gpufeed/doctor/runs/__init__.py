"""Running a training script for the doctor, as values: what to run, how to watch it, one runner protocol, and the
pairs of runs every paired judgement is made on.

- script.py: Script (the target, its arguments, module or file) and WatchSettings (steps, warm-up, profiled steps,
  timeout): the typed values the library takes, apart from any command line
- runner.py: Run (one run's watched steps, or why they cannot be compared) and the Runner protocol; its three
  implementations are this process (trials/runs.py's `run_once`), a subprocess (process.py) and a torchrun job
  (ranks/job.py's `JobRunner`)
- process.py: the subprocess runner (`python -m gpufeed doctor --json` in a fresh process: the A/B mode's, since two
  checkouts must not share imported modules)
- pairs.py: `run_pairs`, BASE and NEW in ABBA order (measure/difference.py's `abba_order`), checked pair by pair,
  the first failing run ending them: `--try`, the ranks' `--try` and the A/B mode all run their pairs here
"""
