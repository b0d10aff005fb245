"""Comparing two runs of one command (doctor, train or bench): which part of the step got slower or faster, and
whether the difference is real. documents.py compares two saved results; pairs.py runs a baseline and a new
training alternately (the doctor's A/B mode, its runs through doctor/runs/); measure/difference.py judges the
differences; model.py holds the result.
figures.py turns each run's samples into judged figures; comparable.py is what compare needs of a kind of
document (Comparable), and doctor.py, train.py and bench.py are each command's: its samples, settings and headline;
kinds.py lists them (COMPARABLE); conditions.py says what differs besides the change; headline.py words the
result."""
