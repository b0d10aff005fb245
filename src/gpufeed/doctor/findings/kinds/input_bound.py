"""input_bound: the step waits for its next batch; the loader, or the loop reading it, is too slow.

Found when the step's input (StepRecord.input_s: the data wait, time blocked in the training loader's `__next__`,
and its `__iter__` and final StopIteration; or, with no DataLoader, the loop building its own batches,
`loop_input_s`) is at least INPUT_SHARE_MEDIUM of the step.

The loop's own input (most of the input is `loop_input_s`: a slice of a np.memmap of token ids, torch.stack and
.to(device) inside the loop, nanoGPT's get_batch): the step waits for the batch the loop reads between the optimizer
step and the next forward, in series with the model. The fix has its own words (`loop_fix`): move the reading into
a Dataset served by a DataLoader with workers, or read whole blocks of a packed token file; nothing about a
loader's settings, and no --try experiment (each one changes a DataLoader: the reason says so). Not judged (a note
says why) when the median step's is under MIN_BLAMED_MS: that is torch's own optimizer-step return and module-call
entry. The median, not the mean: reading is a cost every step pays, and on a busy host one step descheduled in
that gap (10 ms against steps of 0.3 ms) would make the mean of ten steps most of the step.

With a DataLoader: The fix suggests min(cores, MAX_SUGGESTED_WORKERS)
workers; when the loader has that many already, a cheaper sample (gpufeed pack and Feed: when the loader wraps a
map-style Dataset of (image, label) batches, `gpufeed.pack(train_set, "train.gpuf")` with the user's name for it,
frameworks/setup.py, else `dataset`); when most of the wait is its workers starting and stopping (RESTART_SHARE),
persistent_workers. The fix names the user's line where the loader's settings are given (`evidence.site`, with
their current values) in the framework's words (frameworks/words.py: TrainingArguments' dataloader_num_workers for
the Hugging Face Trainer, say).

Inside the loader (doctor/loader_split.py times the parts): the evidence gives each batch's __getitem__,
collate, hand-over and pinning, and the part that costs the loop most (`dominant_part`; __getitem__ and collate
count over the workers, which share them; none when a part that applies was not timed). A dominant collate gets
its own fix, naming the function's file:line (do its work once ahead of training, or in the Dataset where workers
share it); a dominant hand-over or pinning theirs (hand over or pin fewer bytes); a dominant __getitem__ the fix
above, its numbers first.

--try: "replay" (the loader's first batches served again from memory: the bound if input were free, reported as
`gain.bound`) and the recommended fix's own experiment (`gain.measured`): "persistent_workers" when restarts are
most of the wait, else "workers" (the suggested workers, persistent, pinned on CUDA) while the loader has fewer
or does not pin.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufeed.doctor.findings.experiments import Declared, LoaderChange, Replay
from gpufeed.doctor.findings.grading import INPUT_SHARE_MEDIUM, confidence, new_finding, severity
from gpufeed.doctor.findings.kind import Evidence, Judged, Kind
from gpufeed.doctor.findings.report import Finding
from gpufeed.doctor.frameworks import words
from gpufeed.doctor.frameworks.setup import PLAIN, Setup
from gpufeed.doctor.notes import Notes

if TYPE_CHECKING:
    from gpufeed.doctor.observation import Observation

# gpufeed's choice: more loader processes than 8 seldom help one GPU and cost memory (one dataset copy each).
MAX_SUGGESTED_WORKERS = 8
# gpufeed's choice: when half the data wait is the loader starting or stopping its workers (__iter__, the final
# StopIteration), the fix is to keep them (persistent_workers), not to add more.
RESTART_SHARE = 0.50
# gpufeed's choice: a part of the loader under a tenth of a millisecond per batch is not what makes the loop wait
# (a batch of 2 collated in 0.03 ms): it is not blamed, and no pre-packing is advised for it. Nor is a loop's own
# input under it a step: in a bare loop (a 2-row slice of an in-memory tensor, torch 2.13 CPU) 35 µs pass from an
# optimizer step post-hook to the next forward pre-hook, 15 of them in torch's return from optimizer.step() and
# 3.5 in the slicing.
MIN_BLAMED_MS = 0.1
# gpufeed's choice: background workers that prepare at least twice what the model consumes keep up; a wait beside
# them is not the loader's throughput (workers starting, a queue run dry once), so input_bound is not the verdict.
KEEPS_UP_RATIO = 2.0
PART_KEYS = ("getitem_ms", "collate_ms", "handover_ms", "pin_ms")  # evidence from inside the loader (per batch)
WORKER_PARTS = ("getitem", "collate")  # the parts each worker process does for its own batches
PART_NAMES = {"getitem": "the Dataset's __getitem__", "collate": "the collate function",
              "handover": "the hand-over from the workers", "pin": "pinning (pin_memory)"}
SHORT_NAMES = {"getitem": "__getitem__", "collate": "collate", "handover": "hand-over", "pin": "pinning"}
ADVISED = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory")  # evidence.settings: as set now
LOOP_NOT_TRIED = ("not tried: the loop builds its batches itself (no DataLoader), and input_bound's experiments (the "
                  "replay of a loader's batches, more loader workers) each change a DataLoader; moving the reading "
                  "into one is an edit of the script")


@dataclass(frozen=True)
class InputBoundEvidence(Evidence):
    """The evidence read beside the detection: by the --try plan (`experiments`), the verdict (`set_aside`) and the
    invariants (`violations`)."""

    loader_workers: int | None
    suggested_workers: int | None
    pin_memory: bool | None
    restart_share_of_wait: float | None
    framework: str | None
    workers_supply_ratio: float | None
    dominant_part: str | None
    parts_below_blame: bool | None
    getitem_ms: float | None
    collate_ms: float | None
    handover_ms: float | None
    pin_ms: float | None
    input_source: str | None  # "loop": the loop builds its own batches (no DataLoader); "loader"; None: older

    @property
    def part_ms(self) -> dict:
        """The loader's parts per batch, by their evidence keys (PART_KEYS)."""
        return {key: getattr(self, key) for key in PART_KEYS}


class InputBound(Kind):
    NAME = "input_bound"
    MEANING = "the step waits for the next batch (the loader, or the loop reading it, is too slow)"
    PART, PER_STEP = "data_wait", "input_s"  # shares.py: the part of the step its cause lives in
    RECOMMEND_AT = 0.05
    RECOMMEND_SOURCE = ("torch-tb-profiler (RunProfile.analyze) recommends a fix when the DataLoader takes over 5% of "
                        "the step")
    FIGURES = ("data_wait_share", "mean_wait_ms", "loader_workers")
    OLD_REPORT_KEYS = ("loader_workers",)  # before the report had its own, the rates sentence read it here
    BEYOND_SHARE_CAUSE = ("the loader's work also slowed the rest of the step, which the wait does not count: its "
                          "Python, or its workers and pin thread, shared the cores with the model's threads")

    def next_remedy(self, finding: dict) -> str | None:
        return ("make each sample cheaper: decode once with gpufeed pack and read the packed file with gpufeed.Feed "
                "(the fix's other remedy; its code follows `# or:`)")

    def detect(self, seen: Observation, notes: Notes, judged: Judged) -> Finding | None:
        totals = seen.totals
        share = totals.share(totals.input_s)
        if share < INPUT_SHARE_MEDIUM:
            return None
        workers, cores = seen.loader.workers, seen.host.cpu_count
        suggested = min(cores, MAX_SUGGESTED_WORKERS) if cores else None
        supporting = seen.count(lambda r: r.input_s >= INPUT_SHARE_MEDIUM * r.wall_s)
        if totals.loop_input_s > totals.data_wait_s:
            typical_ms = 1000.0 * statistics.median(r.loop_input_s or 0.0 for r in seen.steps)
            if typical_ms < MIN_BLAMED_MS:
                notes.run(f"loop input: {typical_ms * 1000:.0f} µs in the median step between the optimizer step "
                          f"and the next forward ({share:.0%} of the step in all), under {MIN_BLAMED_MS} ms: "
                          f"torch's own return from optimizer.step() and entry into the model's call take tens of "
                          f"µs, so this is not the loop reading its batches, and input_bound is not judged from it")
                return None
            evidence = {"data_wait_share": share, "mean_wait_ms": 1000.0 * totals.input_s / totals.steps,
                        "loader_workers": None, "cpu_count": cores, "suggested_workers": suggested,
                        "input_source": "loop", "loop_input_ms": 1000.0 * totals.loop_input_s / totals.steps}
            return new_finding(self.NAME, severity(share), share, evidence,
                               loop_fix(evidence["loop_input_ms"], share, suggested, seen.on_gpu),
                               confidence(supporting))
        if workers is None:
            notes.unmeasured("DataLoader workers: not read (the loader is not a torch DataLoader, or it was not "
                             "reachable)")
        restart_share = seen.loader.restart_s / totals.data_wait_s
        evidence = {"data_wait_share": share, "mean_wait_ms": 1000.0 * totals.input_s / totals.steps,
                    "loader_workers": workers, "pin_memory": seen.loader.pin_memory, "cpu_count": cores,
                    "suggested_workers": suggested, "restart_share_of_wait": restart_share, "input_source": "loader"}
        evidence.update(loader_parts(seen, notes))
        evidence["workers_supply_ratio"] = supply_ratio(seen, evidence)
        evidence.update(words.loader_evidence(seen.setup, ADVISED, notes))
        restarts = restart_share if workers and restart_share >= RESTART_SHARE else None
        return new_finding(self.NAME, severity(share), share, evidence,
                           fix(suggested, seen.on_gpu, workers, restarts, inside=evidence, setup=seen.setup),
                           confidence(supporting))

    def set_aside(self, finding: Finding) -> str | None:
        """Not the verdict while its workers keep up (`keeps_up`): the wait is not the loader's throughput."""
        if not keeps_up(finding):
            return None
        evidence = InputBoundEvidence.of(finding.evidence)
        return (f"verdict: not input_bound, though the steps wait {finding.share:.0%} for data: the "
                f"{evidence.loader_workers} workers prepare {evidence.workers_supply_ratio:.1f}x the batches the model "
                f"consumes, so the wait is not the loader's throughput (workers starting, or the queue run dry once)")

    def violations(self, finding: Finding, findings: list[Finding]) -> list[str]:
        """A part blamed ("takes the most") costs the loop at least MIN_BLAMED_MS a batch, and no pre-packing is
        advised when every part is under it."""
        evidence = InputBoundEvidence.of(finding.evidence)
        found = []
        part = evidence.dominant_part
        if part is not None and cost_to_loop(evidence.part_ms, part, evidence.loader_workers) < MIN_BLAMED_MS:
            found.append(f"input_bound blames {part}, under {MIN_BLAMED_MS} ms a batch")
        if evidence.parts_below_blame and "gpufeed pack" in finding.fix:
            found.append("input_bound advises pre-packing for loader parts under the blame level")
        return found

    def experiments(self, finding: Finding, cuda: bool) -> Declared:
        """The replay (the bound if input were free), and the experiment of the fix it recommends: the workers kept
        alive when restarts are most of the wait; else the suggested workers (and pinned memory on CUDA) while the
        loader has fewer or does not pin. A cheaper sample (gpufeed pack and Feed) has no experiment: the reason
        says so, and the finding's measured gain is then None with the bound beside it."""
        evidence = InputBoundEvidence.of(finding.evidence)
        if evidence.input_source == "loop":
            return [], LOOP_NOT_TRIED
        found: list = [Replay()]
        workers = evidence.suggested_workers or min(os.cpu_count() or 1, MAX_SUGGESTED_WORKERS)
        current = evidence.loader_workers
        restarts = evidence.restart_share_of_wait or 0.0
        framework = evidence.framework or "torch"
        if current and restarts >= RESTART_SHARE:
            path = words.experiment_path(framework, {"num_workers": str(current), "persistent_workers": "True"})
            found.append(LoaderChange("persistent_workers", workers=current, path=path))
            return found, None
        more = current is None or current < workers
        pin = cuda and evidence.pin_memory is not True
        if more or pin:
            changes = {**({"num_workers": str(workers), "persistent_workers": "True"} if more else {}),
                       **({"pin_memory": "True"} if pin else {})}
            found.append(LoaderChange("workers", workers=workers if more else None, pin_memory=pin,
                                      path=words.experiment_path(framework, changes)))
            return found, None
        return found, (f"the fix recommended (a cheaper sample: gpufeed pack and gpufeed.Feed) has no experiment: "
                       f"the loader already has {current} workers (suggested {workers}), so only the bound if input "
                       f"were free is measured")


def supply_ratio(seen: Observation, inside: dict) -> float | None:
    """With background workers, the batches they can prepare per second over the batches the model consumes:
    the loop's cost of a batch is the larger of its workers' part (__getitem__ and collate, shared over the
    workers) and the main process's (hand-over and pinning, one batch at a time); the model's is the step less
    its data wait, per loader batch. None without workers or without the loader's parts timed."""
    workers = seen.loader.workers
    names = ["getitem_ms", "collate_ms", "handover_ms"] + (["pin_ms"] if seen.loader.pin_memory else [])
    if not workers or any(inside.get(name) is None for name in names):
        return None
    totals = seen.totals
    cost_ms = max((inside["getitem_ms"] + inside["collate_ms"]) / workers,
                  inside["handover_ms"] + (inside["pin_ms"] or 0.0 if seen.loader.pin_memory else 0.0))
    model_ms = 1000.0 * (totals.wall_s - totals.data_wait_s) / totals.steps / (seen.shape.batches_per_step or 1)
    return model_ms / cost_ms if cost_ms > 0 else None


def keeps_up(finding: Finding) -> bool:
    """The workers prepare at least KEEPS_UP_RATIO of what the model consumes, and restarts are not most of the
    wait: then the wait is not the loader's throughput, and the finding is not the verdict (verdict.py)."""
    evidence = InputBoundEvidence.of(finding.evidence)
    ratio = evidence.workers_supply_ratio
    restarts = (evidence.restart_share_of_wait or 0.0) >= RESTART_SHARE
    return ratio is not None and ratio >= KEEPS_UP_RATIO and not restarts


def loader_parts(seen: Observation, notes: Notes) -> dict:
    """The evidence from inside the loader (doctor/loader_split.py defines the parts): per batch, milliseconds,
    `getitem_ms`, `collate_ms`, `handover_ms` (None without workers), `pin_ms` (None unpinned), over
    `batches_split` batches; the collate function (`collate_fn`, `collate_site`: file:line) and `dominant_part`.
    A part that applies but was not timed is None, and `notes` say why."""
    split, parts = seen.totals.loader_split, seen.loader.parts
    ms = split.per_batch_ms() if split is not None else dict.fromkeys(PART_KEYS)
    for gap in parts.gaps if parts is not None else ():
        notes.unmeasured(gap)
    applicable = [*WORKER_PARTS, *(("handover",) if seen.loader.workers else ()),
                  *(("pin",) if seen.loader.pin_memory else ())]
    missing = [part for part in applicable if ms[f"{part}_ms"] is None]
    if missing and not (parts and parts.gaps):
        notes.unmeasured(f"DataLoader time by part ({', '.join(missing)}): not timed inside the loader; the "
                         "batches did not come through a torch DataLoader iterator made while the doctor watched "
                         "(watch(loader) times the loader from outside)")
    dominant = None if missing else dominant_part(ms, applicable, seen.loader.workers)
    tiny = dominant is not None and cost_to_loop(ms, dominant, seen.loader.workers) < MIN_BLAMED_MS
    return {**ms, "batches_split": split.batches if split is not None else 0,
            "collate_fn": parts.collate_name if parts else None, "collate_site": parts.collate_site if parts else None,
            "dominant_part": None if tiny else dominant, "parts_below_blame": tiny}


def cost_to_loop(ms: dict, part: str, workers: int | None) -> float:
    """A part's cost per batch to the loop, in ms: __getitem__ and collate over the workers that share them."""
    return ms[f"{part}_ms"] / (workers if workers and part in WORKER_PARTS else 1)


def dominant_part(ms: dict, applicable: list[str], workers: int | None) -> str:
    """The part that costs the loop most per batch: __getitem__ and collate run in every worker process at once,
    so their cost per batch to the loop is their time over the workers; the hand-over and pinning go one batch at
    a time (the main process, its one pin thread)."""
    return max(applicable, key=lambda part: cost_to_loop(ms, part, workers))


def loop_fix(ms: float, share: float, workers: int | None, on_gpu: bool) -> tuple[str, str]:
    """The fix when the loop builds each batch itself (no DataLoader): `ms` a step (`share` of it) between the
    optimizer step and the next forward; `workers` the count suggested from the cores."""
    count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
    copies = (", and copy each batch with pin_memory() and .to(device, non_blocking=True)" if on_gpu else "")
    text = (f"The loop builds each batch itself ({_ms(ms)} a step, {share:.0%} of the step, between the optimizer "
            f"step and the next forward), in series with the model. Move the reading into a Dataset served by a "
            f"DataLoader with worker processes (num_workers={count}, persistent_workers=True"
            + (", pin_memory=True" if on_gpu else "") + "), which prepare the next batches while the model "
            "trains; or read a packed token file (np.memmap) a whole block at a time, one slice a sample rather "
            f"than many small reads{copies}.")
    pin = ", pin_memory=True" if on_gpu else ""
    snippet = ("import numpy as np\n"
               "class Blocks(torch.utils.data.Dataset):  # the reading, out of the loop\n"
               "    def __init__(self, path, block_size):\n"
               "        self.path, self.block_size = path, block_size\n"
               "        self.length = len(np.memmap(path, dtype=np.uint16, mode=\"r\")) - block_size  # your dtype\n"
               "    def __len__(self):\n"
               "        return self.length\n"
               "    def __getitem__(self, i):\n"
               "        data = np.memmap(self.path, dtype=np.uint16, mode=\"r\")  # opened in each worker\n"
               "        block = torch.from_numpy(data[i:i + self.block_size + 1].astype(np.int64))\n"
               "        return block[:-1], block[1:]\n\n"
               "blocks = Blocks(\"train.bin\", block_size)\n"
               "loader = torch.utils.data.DataLoader(\n"
               "    blocks, batch_size=batch_size, num_workers=" + count + ", persistent_workers=True" + pin + ",\n"
               "    sampler=torch.utils.data.RandomSampler(blocks, replacement=True, num_samples=steps * batch_size))\n"
               "for x, y in loader:\n"
               + ("    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)\n" if on_gpu else "")
               + "    ...")
    return text, snippet


def fix(workers: int | None, on_gpu: bool, current: int | None = None,
                restart_share: float | None = None, inside: dict | None = None,
                setup: Setup = PLAIN) -> tuple[str, str]:
    """`workers`: the suggested count; `current`: the loader's own. When it already has that many, more
    processes cannot help (each would get less of a core): the fix is a cheaper sample. `restart_share`: the
    share of the wait spent starting or stopping the workers, when that is most of it. `inside`: the evidence
    from inside the loader (`loader_parts`): a dominant collate, hand-over or pinning gets its own fix; a
    dominant __getitem__ the fix below, with its numbers first. `setup`: the framework and the loader's site, for
    the fix's words (frameworks/words.py)."""
    device = "cuda" if on_gpu else "cpu"
    if restart_share is not None:
        fix = (f"The step waits for its next batch, and {restart_share:.0%} of that wait is the DataLoader starting "
               f"or stopping its {current} worker processes at an epoch's start or end, not loading (with "
               f"multiprocessing_context=\"spawn\" each start imports torch and your script again in every worker). "
               f"Keep them alive between epochs: {words.set_loader(setup, {'persistent_workers': 'True'})}.")
        return fix, words.loader_snippet(setup, {"num_workers": str(current), "persistent_workers": "True"})
    part = (inside or {}).get("dominant_part")
    if part in ("collate", "handover", "pin"):
        return _part_fix(part, inside, workers, current, setup)
    if (inside or {}).get("parts_below_blame"):
        return _overhead_fix(inside, workers, current, setup)
    measured = f"Inside the loader, {_per_batch(inside)} " if part else ""
    feed = _feed_snippet(setup, device)
    if current is not None and workers is not None and current >= workers:
        fix = (f"The step waits for its next batch, and the DataLoader already has {current} worker processes, as "
               f"many as suggested here ({workers}, from the cores): more would only share the same cores. Make "
               f"each sample cheaper: decode once with {_pack_words(setup)} and read the packed file with gpufeed.Feed "
               f"(uint8 batches gathered on threads, augmentation done per batch"
               + (" on the device" if on_gpu else "") + ", not per sample in Python), and keep the workers alive "
               "across epochs: " + words.set_loader(setup, {"persistent_workers": "True",
                                                            **({"pin_memory": "True"} if on_gpu else {})}) + ".")
        return measured + fix, feed
    count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
    changes = {"num_workers": count, **({"pin_memory": "True"} if on_gpu else {}), "persistent_workers": "True",
               "prefetch_factor": "4"}
    fix = (f"The step waits for its next batch. Give {words.loader_noun(setup)} more worker processes"
           + (" and pinned memory" if on_gpu else "") + ", and keep the workers alive across epochs: "
           + words.set_loader(setup, changes) + f"; or decode once with {_pack_words(setup)} and read the packed "
             "file with gpufeed.Feed, which gathers uint8 batches on threads and augments on the device.")
    return measured + fix, f"{words.loader_snippet(setup, changes)}\n\n# or: {feed[2:]}"


def _pack_call(setup: Setup) -> str | None:
    """`gpufeed.pack(train_set, "train.gpuf")` when the loader wraps a map-style Dataset of (image, label) items
    (`setup.packable`; named as the user's line names it, else `dataset`), which pack takes as it is; None
    otherwise (the command line packs a folder)."""
    if not setup.packable:
        return None
    return f"gpufeed.pack({setup.dataset_variable or 'dataset'}, \"train.gpuf\")"


def _pack_words(setup: Setup) -> str:
    return f"`{_pack_call(setup) or 'gpufeed pack'}`"


def _feed_snippet(setup: Setup, device: str) -> str:
    """Pack once (the user's Dataset, else a folder on the command line), then read the file with gpufeed.Feed."""
    call = _pack_call(setup)
    path = "train.gpuf" if call else "data/train.gpuf"
    head = ("# pack once (the Dataset without its random augmentation and Normalize: Feed does both per batch), "
            f"then\nimport gpufeed\n{call}\n" if call
            else "# pack once (gpufeed pack photos/ data/train.gpuf), then\nimport gpufeed\n")
    return (f"{head}feed = gpufeed.Feed(\"{path}\", batch_size=batch_size, device=\"{device}\")\n"
            f"for images, labels in feed:\n"
            f"    ...")


def _overhead_fix(inside: dict, workers: int | None, current: int | None, setup: Setup) -> tuple[str, str]:
    """The fix when every part of the loader is under MIN_BLAMED_MS a batch: the wait is the loader's fixed cost
    per batch (its Python around the parts), which a larger batch spreads and workers move off the loop."""
    parts = ", ".join(f"{SHORT_NAMES[name]} {_ms(inside[f'{name}_ms'])}" for name in SHORT_NAMES
                      if inside.get(f"{name}_ms") is not None)
    count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
    text = (f"The step waits for its next batch, but no part of the loader is slow ({parts} per batch, each under "
            f"{MIN_BLAMED_MS} ms): the wait is the DataLoader's fixed cost per batch, not the data. A larger batch "
            f"spreads that cost over more samples (scale the learning rate with it)")
    changes = {"num_workers": count, "persistent_workers": "True"}
    if not current:
        text += f"; worker processes take it off the training loop: {words.set_loader(setup, changes)}"
    return text + ".", (words.loader_snippet(setup, changes)
                        + "\n# and a larger batch: the loader's fixed cost per batch spread over more samples")


def _per_batch(inside: dict) -> str:
    """The dominant part and the others, per batch: "the collate function takes the most: 20.4 ms per batch
    (__getitem__ 0.03 ms, ...)"."""
    part = inside["dominant_part"]
    others = ", ".join(f"{SHORT_NAMES[name]} {_ms(inside[f'{name}_ms'])}" for name in SHORT_NAMES
                       if name != part and inside.get(f"{name}_ms") is not None)
    workers = inside.get("loader_workers")
    shared = f" in a worker, {workers} workers sharing the batches" if workers and part in WORKER_PARTS else ""
    return f"{PART_NAMES[part]} takes the most: {_ms(inside[f'{part}_ms'])} per batch{shared} ({others})."


def _ms(value: float) -> str:
    return f"{value:.1f} ms" if value >= 1 else f"{value:.2g} ms"


def _part_fix(part: str, inside: dict, workers: int | None, current: int | None,
              setup: Setup = PLAIN) -> tuple[str, str]:
    """The fix when the collate function, the hand-over or pinning costs the loop most."""
    opening = f"The step waits for its next batch, and inside the loader {_per_batch(inside)} "
    if part == "collate":
        site = inside.get("collate_site")
        named = f"{inside.get('collate_fn') or 'the collate function'}" + (f" ({site})" if site else "")
        count = str(workers) if workers is not None else "min(os.cpu_count(), 8)"
        where = (f"{named} runs in the training process (num_workers=0), inside that wait. " if not current
                 else f"{named} runs once per batch in one of the {current} workers. ")
        more = words.set_loader(setup, {"num_workers": count})
        spread = (f" Or move that work into the Dataset's __getitem__ and give {words.loader_noun(setup)} worker "
                  f"processes ({more}), so that they do it in parallel while the model trains." if not current
                  else f" Or give {words.loader_noun(setup)} more workers to share it: {more}."
                  if workers is not None and current < workers else "")
        text = (opening + where + "Do its per-sample work (tokenising, decoding, padding) once ahead of training "
                "instead of in every batch: pre-tokenise or pre-pack the dataset (`gpufeed pack` decodes images "
                "once), so that collate only stacks tensors." + spread)
        snippet = (f"# the per-sample work of {named}, done once ahead of training (or in __getitem__):\n"
                   f"prepared = [prepare(sample) for sample in dataset]  # tokenised, decoded: save it, load it\n"
                   f"loader = torch.utils.data.DataLoader(prepared, batch_size=batch_size, shuffle=True,\n"
                   f"                                     num_workers={count})  # default_collate stacks")
        return text, snippet
    how = ("Each batch is pickled in a worker and rebuilt in the training process: tensors through shared "
           "memory, every other Python object copied. Hand over less: a few stacked tensors rather than lists "
           "of small ones or Python objects, uint8 images rather than float32 (convert and normalise on the "
           "device)" if part == "handover" else
           "The DataLoader's one pin thread copies every batch into page-locked memory. Pin fewer bytes: uint8 "
           "images rather than float32 (convert and normalise on the device)")
    text = (opening + how + "; or read a packed file with gpufeed.Feed, whose threads "
            + ("hand nothing over between processes." if part == "handover"
               else "stage batches into reused pinned buffers."))
    snippet = ("# in the collate function: one uint8 tensor per field\n"
               "images = torch.stack([image for image, _ in samples])  # uint8 (B, C, H, W)\n"
               "labels = torch.tensor([label for _, label in samples])\n"
               "# in the loop: convert on the device\n"
               "images = images.to(device, non_blocking=True).float().div_(255)")
    return text, snippet
