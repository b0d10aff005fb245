"""The command line: the only place that reads flags, prints and sets exit statuses (0 done, 1 failed, 2 wrong input).

Modules:
- main.py: builds the parser (one-line usage errors), runs one command, maps errors to exit statuses
- output.py: --json to a file or standard output, --html, the saved document with its about block, the consoles
- info.py: gpufeed info, what this machine is
- pack.py: gpufeed pack, write or --verify a .gpuf packed dataset
- train.py: gpufeed train, the main job, with its progress bar and summary
- doctor.py: gpufeed doctor, run a script unmodified and say what holds it back
- doctor_show.py: what the doctor prints on every path: verdict, findings with fixes and gains, rates, ranks, notes
- doctor_ab.py: the doctor's A/B mode (--baseline, --baseline-args): pairs of processes, one comparison
- doctor_ranks.py: the doctor on several ranks (--nproc-per-node N) through torch.distributed.run
- compare.py: gpufeed compare, two saved results side by side, and --fail-if-slower for CI
- bench.py: gpufeed bench, CPU against GPU against the hardware's peak
- plan.py: gpufeed plan, what hardware a training needs and which GPU to buy or rent
- report.py: gpufeed report, the HTML page of a saved --json result
"""
