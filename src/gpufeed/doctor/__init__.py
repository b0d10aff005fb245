"""gpufeed doctor and gpufeed.watch: watch a training loop, name its bottleneck with evidence, and measure the fix.

`gpufeed.doctor.run(script, *args, steps=50, ...)` returns the Report that `gpufeed doctor` prints (session.py).

The flow, by stage: observe/ runs the script (or the loop `watch()` wraps) with hooks feeding a Watcher, whose
`observe()` makes one Observation (observation.py); findings/ turns an Observation into a Report (findings/diagnose.py);
trials/ (--try) re-runs the script with each leading fix and measures it; ranks/ does all of that on every rank of
a torchrun job. The command line (cli/doctor*.py) only parses flags, prints and says the exit status.

Arrows (each may import only what it lists; nothing below imports what is above it):
- session.py -> ranks/, trials/, runs/, observe/, findings/, notes.py
- ranks/ -> trials/, runs/, observe/, findings/, observation.py, notes.py, patching.py
- trials/ -> runs/, observe/, findings/, frameworks/, notes.py, patching.py
- runs/: nothing of the doctor's (values, the Runner protocol, the pairs)
- wrapper.py -> observe/, findings/
- observe/ -> observation.py, frameworks/, notes.py, patching.py (never findings/)
- findings/ -> observation.py, frameworks/, notes.py (never observe/; no torch)
- observation.py -> frameworks/, notes.py
- frameworks/ -> notes.py, patching.py
- notes.py, patching.py: nothing of the doctor's

Here:
- observation.py: Observation, the typed, frozen record of a run the findings read, with its parts and Totals
  (the profiled steps and the step's FLOPs included)
- notes.py: Note (about the run, or not measured), Notes, unmeasured: the lines every stage adds to a report
- patching.py: Patch (reversible), AfterImport and when_imported, the first tensor of a batch, the user's line
  that called a library
- wrapper.py: watch() and the WatchedLoop it returns (an iterable wrapper and a context manager); its report()
  is diagnose(observe())
- session.py: run(), doctor_script() (one process), doctor_ranks() (a torchrun job): the library's entry, which the
  command line calls
Folders (each __init__.py is the map of its own):
- frameworks/: the training framework and the training loader's site, and the fixes in the framework's words
- observe/: the in-process run, the hooks, the loader split, the step clock and contents, profile, FLOPs, Watcher
- findings/: one module per finding kind, grading, stalls, diagnose, and the Report types
- trials/: --try: the changes, async_item, the plan of experiments, the runs and their gains
- ranks/: several ranks: the rank context and exchange, the rank timing, the torchrun jobs, one rank's run
- runs/: Script and WatchSettings, the Runner protocol and its subprocess runner, the pairs in ABBA order
"""


def __getattr__(name: str):
    if name == "run":  # loaded on first use: the findings, which the report pages read, load no torch
        from gpufeed.doctor.session import run

        return run
    raise AttributeError(f"module 'gpufeed.doctor' has no attribute {name!r}")
