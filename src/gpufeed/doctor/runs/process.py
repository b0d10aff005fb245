"""The subprocess runner: one run of the script as `python -m gpufeed doctor --json` in a fresh process, the A/B
mode's (two checkouts must never share imported modules in one interpreter). Each run watches the same steps with
the profiled window off; its Run carries the saved document (the comparison reads it) and its watched steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpufeed.doctor.runs.runner import Run
from gpufeed.doctor.runs.script import Script, WatchSettings


class InSubprocess:
    """A Runner whose runs are each `gpufeed doctor --json` in a new process (`nproc_per_node`: as a torchrun job
    of that many ranks); the documents are written into `folder`, named `name(run number)`."""

    def __init__(self, folder: Path, nproc_per_node: int | None = None):
        self.folder, self.nproc_per_node, self.runs = Path(folder), nproc_per_node, 0

    def __call__(self, script: Script, settings: WatchSettings, experiment: Any = None, name: str = "") -> Run:
        if experiment is not None:
            raise ValueError("a subprocess run installs no experiment: --try runs in this process or as torchrun jobs")
        self.runs += 1
        name = name or f"run-{self.runs}"
        output = self.folder / f"{name}.json"
        command = [sys.executable, "-m", "gpufeed", "doctor", "--steps", str(settings.steps), "--warmup",
                   str(settings.warmup), "--profile-steps", "0", "--timeout", f"{settings.timeout_s:g}", "--json",
                   str(output)]
        if self.nproc_per_node:
            command += ["--nproc-per-node", str(self.nproc_per_node)]
        done = subprocess.run([*command, *script.words()], capture_output=True, text=True, env=dict(os.environ))
        if done.returncode != 0 or not output.is_file():
            lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
            last = lines[-1] if lines else f"exit status {done.returncode}"
            return Run([], f"the {name} run of `{script.named()}` failed (exit status {done.returncode}): {last}")
        document = json.loads(output.read_text(encoding="utf-8"))
        steps = list((document.get("timeline") or {}).get("steps") or []) if isinstance(document, dict) else []
        if not steps:
            unmeasured = document.get("unmeasured", []) if isinstance(document, dict) else []
            return Run([], f"the {name} run of `{script.named()}` watched no training step: "
                           f"{'; '.join(unmeasured[:1]) or 'see gpufeed doctor on it alone'}", document=document)
        return Run([], None, document=document)
