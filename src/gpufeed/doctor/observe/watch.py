"""Watch a training loop: one `StepRecord` per step, saying where the step's wall time went.

The `Watcher` is told about events (a batch handed out after a wait, a host-to-device copy, a host wait on the
device, a step boundary) by the instrumentation (hooks.py) or by the `watch()` wrapper (doctor/wrapper.py); it keeps
the records, and `observe()` turns them and what else it saw into the one Observation the findings read.

Step boundaries come from four sources, in priority order: `w.step()` ("manual"), an optimizer step (the global
post-hook: "optimizer"), the loader handing out a batch ("loader"), and the outermost module's forward that
follows a backward pass ("forward"). The highest-priority source seen so far is the step clock; boundaries from
lower ones are ignored. When a higher source first fires, counting restarts there (in a typical loop that happens
inside the first step, so nothing watched is lost). The first boundary of the clock only marks a start; the next
`warmup` steps are discarded; then `steps` records are kept (`watched` turns True). Then, unless
`profile_steps` is 0, torch.profiler runs over a profiler warm-up step and `profile_steps` more (profile.py: operators
and kernels per step, the device's busy time as the union of kernel intervals), so that the watched steps carry no
profiler overhead; `done` turns True when that window ends (at once with profile_steps=0). When the loop ends
first, `close()` keeps what was profiled and says why the rest is missing.

What a step holds (clock.py): several batches with gradient accumulation (batch size and samples/s count a
step's samples); only the training loader's batches, not a validation loader's; several optimizers' steps.

The step's compute on the host clock (parts.py): `forward_s`, the forward of the step's model (its first outermost
module called with grad enabled: hooks on that one module), and `optimizer_s`, the optimizer steps that began in
the step, are summed into the step as they end, like the data wait; `backward_s` is what the wall time leaves
(the loss, the backward pass, zero_grad, the loop's own Python). On CUDA they are host times (kernels run
asynchronously). A part is 0.0 in a step where it is timed and did not run, None until it is timed (no
instrumentation, or before the step's model was first called).

The loop's own input work (`loop_input_s`): in a loop that reads its batches itself (a slice of a np.memmap of
token ids, torch.stack, .to(device): nanoGPT's get_batch), with no DataLoader batch seen, the host time from the
step's start (the optimizer's or a manual boundary: the end of the step before, once the doctor's bookkeeping at
that boundary is done and the script has its step back) to the start of the step's first forward of its model with
grad enabled, less the copies and host waits counted in it (on CUDA the .to() copies are
copy_s already) and the model's forwards under torch.no_grad there (a validation pass). It also holds whatever
else the loop does there (zero_grad, a learning-rate schedule, logging): mostly the reading. Not taken, so left in
`backward_s`: a batch read after the forward (nanoGPT prefetches the next batch during the backward), the
micro-batches after the first with gradient accumulation. None when not timed: a DataLoader batch seen (from that
step on), another clock (the forward clock's boundary is the forward itself), the model not yet known.

Compute time (`compute_s`) is measured only on CUDA: events recorded on the current stream from the step's start
(or a batch's arrival) to the step's end (or the next wait for a batch), summed; it includes idle gaps between
kernels when the loop is launch-bound (the profiled window measures the gaps). Events are read back only when
`records` is asked for (one synchronize). Off CUDA it is None: the device is the host, so wall time minus data wait
is the compute.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch

from gpufeed.doctor.frameworks.setup import LoaderOrigin, setup_of
from gpufeed.doctor.notes import Note, unmeasured
from gpufeed.doctor.observation import (
    BatchProbe,
    Host,
    LoaderParts,
    LoaderSettings,
    MemoryReading,
    Observation,
    PaddingTrial,
    ProfileSummary,
    ProfileWindow,
    Ranks,
    TransformerSize,
)
from gpufeed.doctor.observe import padding, probe
from gpufeed.doctor.observe.clock import (
    Held,
    StepContents,
    batch_size_of,
    counted_by,
    image_batch,
    loader_batch_size,
    step_shape,
)
from gpufeed.doctor.observe.flops import FlopCount, step_arithmetic
from gpufeed.doctor.observe.profile import PROFILE_STEPS, StepProfiler, cuda_traced, profile_notes
from gpufeed.doctor.observe.scheduler import run_delay_s
from gpufeed.doctor.observe.tokens import count_tokens
from gpufeed.doctor.observe.worker_memory import WorkerMemory
from gpufeed.measure.sampler import Sampler
from gpufeed.measure.steps import HostSample, LoaderSplit, StepRecord, backward_seconds
from gpufeed.measure.timing import event_pairs_seconds

SOURCES = ("forward", "loader", "optimizer", "manual")  # lowest priority first
CPU_DEVICE = ("host-to-device copies: the device is the CPU",
              "sync stalls: the device is the CPU (.item() does not wait for a device)",
              "device compute time: the device is the CPU; wall time minus data wait is the compute")
_ZERO_STEP = {"data_wait_s": 0.0, "copy_s": 0.0, "copy_bytes": 0, "copy_pageable_bytes": 0, "sync_count": 0,
              "sync_s": 0.0, "batch_size": None, "loader_split": None, "forward_s": None, "optimizer_s": None,
              "tokens": None, "real_tokens": None, "loop_input_s": None}
LOOP_INPUT_CLOCKS = ("optimizer", "manual")  # clocks whose boundary ends a step, not begins its forward (see above)
PARTS = ("forward", "optimizer")  # the step's parts timed on the host (parts.py), as `forward_s`, `optimizer_s`


class Watcher:
    """Collects `steps` StepRecords after `warmup` steps, then profiles `profile_steps` more (0: none). `device`
    is "cpu", "cuda" or None (found out: the first CUDA parameter, input or copy seen makes it "cuda")."""

    def __init__(self, steps: int = 50, warmup: int = 5, device: str | None = None,
                 profile_steps: int = PROFILE_STEPS):
        if steps < 1 or warmup < 0 or profile_steps < 0:
            raise ValueError(f"steps must be at least 1, warmup and profile_steps at least 0, got {steps}, "
                             f"{warmup} and {profile_steps}")
        self.steps, self.warmup, self.device, self.profile_steps = steps, warmup, device, profile_steps
        self.done = False  # the watched steps and the profiled window are over: the doctor stops the script
        self.profile: ProfileSummary | None = None  # the profiled window, once it ended
        self._profiler: StepProfiler | None = None  # while the window runs
        self.source: str | None = None  # the step clock, one of SOURCES
        self.steps_closed = 0  # steps ended by the clock, warm-up included
        self.boundaries = 0  # every accepted boundary, for the watchdog: has anything moved?
        self.forward_batch_size: int | None = None  # rows of the model's last forward with grad
        self.seen: Counter = Counter()  # forwards, backwards, optimizer steps, batches, loaders: what happened
        self.float64_seen = False
        self.autocast_seen: bool | None = None  # an outermost forward ran under torch.autocast (None: none seen)
        self.loader_workers: int | None = None
        self.loader_pin_memory: bool | None = None
        self.loader_parts: LoaderParts | None = None  # the training loader iterator's (loader_split.py)
        self.loader_origin: LoaderOrigin | None = None  # where the training loader was built (frameworks/setup.py)
        self.image_batches: bool | None = None  # the first training batch was (images, labels) (clock.py)
        self.pad_token_id: int | None = None  # the model's padding id, from the first training forward (tokens.py)
        self.model_size: TransformerSize | None = None  # the step's model as the FLOPs rule reads it (flops.py)
        self.loader_site: tuple | None = None  # where its batches are asked for (call_site)
        self.threads: int | None = None  # torch's intra-op threads as the script left them (None: read now)
        self.notes: list[Note] = []  # what the instrumentation could not measure
        self._start_s = self._last_s = time.perf_counter()
        self._resumed_s = self._last_s  # when the script got its step back from the last boundary (loop_input_s)
        self._last_delay = run_delay_s()  # the thread's wait for a core so far (scheduler.py)
        self._sampler: Sampler | None = None
        self._raw: list[tuple[dict, list, Held]] = []  # closed steps past warm-up: fields, CUDA event pairs, Held
        self._timed: set[str] = set()  # the PARTS being timed: a step starts them at 0.0, not None
        self._before_forward = True  # the step's first forward of its model with grad enabled has not begun
        self._no_grad_forward_s = 0.0  # the step's model's calls under torch.no_grad before it (validation)
        self._step, self._regions, self._region_start = self._new_step(), [], None
        self._step_length_positions = 0  # the step's token positions, each times its sequence's length
        self.contents = StepContents()  # the step's training batches and model rows (clock.py)
        self.flop_count = FlopCount()  # the FLOPs of the last warm-up step (flops.py)
        self.capture: probe.Capture | bool | None = None  # the first training forward, for the probe (False: none)
        self.probing = False  # the batch probe is running: the hooks ignore its forwards
        self._probed: tuple[BatchProbe | None, list[Note]] | None = None
        self.padding = padding.Tally()  # the training batches' padding (padding.py)
        self.padding_capture: padding.Capture | bool | None = None  # a watched call, for the trial (False: none)
        self.tokenizer_calls = padding.TokenizerCalls()  # the padding the script asked tokenizers for
        self.collate_fn = None  # the training loader's, where its padding may be made
        self._step_cuttable = False  # the step's training batch has columns that are padding in every row
        self._padded: tuple[PaddingTrial | None, list[Note]] | None = None
        self.worker_memory = WorkerMemory()  # the training loader's workers' private memory
        self.batch_size_source: str | None = None  # how a training batch's samples were counted

    # --- lifetime -----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._start_s = self._last_s = self._resumed_s = time.perf_counter()
        self._last_delay = run_delay_s()
        if self._sampler is None:
            self._sampler = Sampler(torch.device("cuda"), keep_samples_from_s=self._start_s)  # this rank's GPU

    def close(self) -> None:
        """Stop the sampler, and end a profiled window still running (the loop ended before it did)."""
        if self._profiler is not None:
            self._end_profile("the loop ended first")
        if self._sampler is not None:
            self._sampler.close()
        self.flop_count.close()

    @property
    def started_s(self) -> float:
        """time.perf_counter() when the watch began: a StepRecord's start_s counts from here."""
        return self._start_s

    @property
    def watched(self) -> bool:
        """All `steps` records are kept (the profiled window may still run)."""
        return len(self._raw) >= self.steps

    # --- events -------------------------------------------------------------------------------------------
    def note_device(self, device: torch.device) -> None:
        if device.type == "cuda" and self.device != "cuda":
            self.device = "cuda"

    def on_wait_start(self) -> None:
        """The loop asks for the next batch: the device's share of the step pauses here (CUDA)."""
        self._close_region()

    def on_batch_wait(self, seconds: float, batch: Any, loader: Any = None, workers: int | None = None,
                      pin_memory: bool | None = None, split: LoaderSplit | None = None,
                      parts: LoaderParts | None = None, origin: LoaderOrigin | None = None,
                      iterator: Any = None) -> None:
        """A batch arrived after `seconds` blocked in the loader's __next__. `loader` names where it was asked
        for (clock.py; None: the loader `watch()` wraps); `workers` and `pin_memory` are its loader's settings;
        `split` the batch's loader time by part and `parts` its iterator's (loader_split.py), None: not timed;
        `origin` where its loader was built (frameworks/setup.py; None: not recorded); `iterator` the loader's
        iterator, whose workers' memory is followed (worker_memory.py)."""
        if self.done:
            return
        self.seen["batches"] += 1
        self._step["loop_input_s"] = None  # a DataLoader feeds the steps: the loop does not build its input
        if not self.contents.is_training(loader):  # validation, say: its wait is step time, not a data wait
            self.contents.on_batch(loader, None, training=False)
            return
        try:
            self.worker_memory.on_training_batch(iterator)
        except Exception as error:  # noqa: BLE001 - a reading must never break the user's loop
            self.worker_memory.problem = f"not followed ({type(error).__name__}: {error})"
        if self.collate_fn is None:
            self.collate_fn = getattr(iterator, "_collate_fn", None)
        if loader is not None:
            self.loader_workers, self.loader_pin_memory, self.loader_parts = workers, pin_memory, parts
            self.loader_origin, self.loader_site = origin, loader
        self._step["data_wait_s"] += seconds
        if split is not None:  # with the wait it splits (which the loader clock closes with the step before)
            earlier = self._step["loader_split"]
            self._step["loader_split"] = split if earlier is None else earlier + split
        self.step_boundary("loader")
        if self.image_batches is None:
            self.image_batches = image_batch(batch)
        loader_batch = loader_batch_size(iterator)
        size = batch_size_of(batch, loader_batch)
        if size is not None and self.batch_size_source is None:
            self.batch_size_source = counted_by(batch, loader_batch)
        if size is not None:
            self._step["batch_size"] = (self._step["batch_size"] or 0) + size
        self._count_tokens(batch)
        self.contents.on_batch(loader, size, training=True)
        self._open_region()

    def on_model_call(self, module: Any, args: tuple, kwargs: dict, started_s: float | None = None) -> None:
        """The step's model was called with grad enabled (parts.py), at time.perf_counter() `started_s` (None:
        now): a loop that builds its own batches, with no training DataLoader seen, has its tokens counted here
        (from its keyword arguments when they hold input_ids, else its positional ones), and the step's first such
        call ends the loop's input work (`loop_input_s`: from the step's start, less the copies, host waits and
        no-grad forwards of the model counted since); the first watched call whose batch has columns of padding is
        kept for the padding trial (padding.py)."""
        if self.done:
            return
        if not self.seen["batches"]:
            self._count_tokens(kwargs if "input_ids" in kwargs else args)
        if self._before_forward:
            self._before_forward = False
            step = self._step
            if step["loop_input_s"] is not None:
                started_s = time.perf_counter() if started_s is None else started_s
                step["loop_input_s"] = max(0.0, started_s - self._resumed_s - step["copy_s"] - step["sync_s"]
                                           - self._no_grad_forward_s)
        if self.padding_capture is None and self.source is not None and self.steps_closed >= self.warmup:
            found = padding.capture(module, args, kwargs, self.pad_token_id, self._step_cuttable)
            if isinstance(found, str):
                self.padding_capture = False
                self._padded = (None, [Note("unmeasured", found)])
            elif found is not None:
                self.padding_capture = found

    def on_no_grad_forward_time(self, seconds: float) -> None:
        """A call of the step's model under torch.no_grad returned after `seconds` (parts.py): before the step's
        first training forward it is not the loop's input work (a validation pass)."""
        if not self.done and self._before_forward:
            self._no_grad_forward_s += seconds

    def _count_tokens(self, batch: Any) -> None:
        """The step's tokens and real tokens from a training batch (tokens.py), and its padding (padding.py); a
        batch without token ids adds nothing, and a step in which some batch had ids but no way to tell padding
        keeps real_tokens None."""
        found = count_tokens(batch, self.pad_token_id)
        if found is None:
            return
        spanned = padding.span(batch, self.pad_token_id)
        if spanned is not None:
            self.padding.add(spanned)
            self._step_cuttable = spanned.cuttable
        step = self._step
        counted_before = step["tokens"] is not None
        step["tokens"] = (step["tokens"] or 0) + found.positions
        self._step_length_positions += found.positions * found.sequence_length
        if found.real is None or (counted_before and step["real_tokens"] is None):
            step["real_tokens"] = None
        else:
            step["real_tokens"] = (step["real_tokens"] or 0) + found.real

    def on_loader_wait(self, seconds: float, loader: Any) -> None:
        """Time in a loader that handed out no batch: its __iter__ (workers starting) or the StopIteration at
        an epoch's end; a data wait of the current step when `loader` (where it was called) feeds the steps."""
        if not self.done and self.contents.is_training(loader):
            self._step["data_wait_s"] += seconds
            self.contents.restart_s += seconds

    def on_forward_input(self, size: int, module: int | None = None, grad: bool = True) -> None:
        """An outermost forward of `module` (an id) returned, its first input `size` rows: under the forward
        clock the step's batch size; without loader batches, the samples of a step (clock.py)."""
        if not grad or not self.contents.on_forward(module, size):
            return
        self.forward_batch_size = size
        if self.source == "forward" and self._step["batch_size"] is None:
            self._step["batch_size"] = size

    @property
    def forwards_wanted(self) -> bool:
        """Whether the forward hooks still have something to say: the forward clock, or the samples of a step
        while no loader batch came and no complete step was counted (at most two steps of the clock)."""
        if self.done or self.source in (None, "forward"):
            return not self.done
        return not self.seen["batches"] and not self.contents.rows_per_step and self.steps_closed < 2

    def on_copy(self, seconds: float, nbytes: int, pinned: bool) -> None:
        if not self.done:
            step = self._step
            step["copy_s"] += seconds
            step["copy_bytes"] += nbytes
            step["copy_pageable_bytes"] += 0 if pinned else nbytes

    def on_sync(self, seconds: float) -> None:
        if not self.done:
            self._step["sync_count"] += 1
            self._step["sync_s"] += seconds

    def timing(self, part: str) -> None:
        """`part` (one of PARTS) is timed from now on: the steps that begin from here hold 0.0 for it when it
        does not run in them."""
        self._timed.add(part)

    def on_forward_time(self, seconds: float) -> None:
        """A call of the step's model with grad enabled returned after `seconds` (parts.py)."""
        if not self.done:
            self._step["forward_s"] = (self._step["forward_s"] or 0.0) + seconds

    def on_optimizer_time(self, seconds: float) -> None:
        """An optimizer step returned after `seconds`, before the boundary it may make (parts.py)."""
        if not self.done:
            self._step["optimizer_s"] = (self._step["optimizer_s"] or 0.0) + seconds

    def _new_step(self) -> dict:
        """A step's fields as it begins: the PARTS timed at 0.0, and the loop's input work when it is timed (the
        step's model known, a clock in LOOP_INPUT_CLOCKS, no DataLoader batch seen)."""
        self._before_forward, self._no_grad_forward_s = True, 0.0
        loop = "forward" in self._timed and self.source in LOOP_INPUT_CLOCKS and not self.seen["batches"]
        return dict(_ZERO_STEP, **{f"{part}_s": 0.0 for part in self._timed}, loop_input_s=0.0 if loop else None)

    def on_float64(self) -> None:
        self.float64_seen = True

    def step_boundary(self, source: str = "manual") -> bool:
        """End the current step by `source`; False when a higher-priority source is the clock (ignored)."""
        if self.done:
            return False
        rank = SOURCES.index(source)
        if self.source is not None and rank < SOURCES.index(self.source):
            return False
        if self._profiler is not None:
            return self._profile_boundary(source)
        self.flop_count.stop()  # before the time is read: no watched step runs under the counter
        now, delay = time.perf_counter(), run_delay_s()
        self.boundaries += 1
        self._close_region()
        held = self.contents.close(clock=source != "loader", complete=self.source == source)
        if self.source != source:  # the first boundary of a (better) clock: start counting here
            self.source, self.steps_closed, self._raw = source, 0, []
        else:
            self.steps_closed += 1
            self.flop_count.keep(self.steps_closed == self.warmup, self._step_tokens())  # the last warm-up step
            if self.steps_closed > self.warmup:
                waited = None if delay is None or self._last_delay is None else delay - self._last_delay
                fields = dict(self._step, index=len(self._raw), start_s=self._last_s - self._start_s,
                              wall_s=now - self._last_s, run_delay_s=waited)
                self._raw.append((fields, self._regions, held))
                if self.watched:
                    self._begin_profile()
        self._step, self._regions, self._last_s, self._last_delay = self._new_step(), [], now, delay
        self._step_length_positions = 0
        self._open_region()
        if self.steps_closed == self.warmup - 1:  # the next step is the last warm-up step: count its FLOPs
            self.flop_count.start()
        self._resumed_s = time.perf_counter()  # the loop's input work starts here, not in the bookkeeping above
        return True

    def _step_tokens(self) -> tuple[int, int] | None:
        """The current step's (token positions, their sequences' length: the mean over the positions), or None
        when its batches held no token ids."""
        positions = self._step["tokens"]
        return (positions, round(self._step_length_positions / positions)) if positions else None

    # --- the profiled window (profile.py) -------------------------------------------------------------------
    def _begin_profile(self) -> None:
        if self.profile_steps == 0:
            self.done = True
            self.worker_memory.stop()
            return
        self._profiler = StepProfiler(self.profile_steps, cuda=cuda_traced(self.device))
        if not self._profiler.start():
            self._end_profile()

    def _profile_boundary(self, source: str) -> bool:
        if source != self.source:  # the clock is settled: a new one would not be compared with the watched steps
            return False
        self.boundaries += 1
        self.steps_closed += 1
        if self._profiler.step():
            self._end_profile()
        return True

    def _end_profile(self, reason: str | None = None) -> None:
        self.profile, self._profiler = self._profiler.finish(reason), None
        self.done = True
        self.worker_memory.stop()

    # --- CUDA compute regions -----------------------------------------------------------------------------
    def _cuda_active(self) -> bool:
        return (self.device == "cuda" and not self.watched and torch.cuda.is_initialized()
                and not torch.cuda.is_current_stream_capturing())

    def _open_region(self) -> None:
        if self._region_start is None and self._cuda_active():
            self._region_start = torch.cuda.Event(enable_timing=True)
            self._region_start.record()

    def _close_region(self) -> None:
        if self._region_start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._regions.append((self._region_start, end))
            self._region_start = None

    # --- results ------------------------------------------------------------------------------------------
    @property
    def records(self) -> list[StepRecord]:
        """The watched steps (on CUDA this waits for the events it reads)."""
        return [StepRecord(**fields, compute_s=event_pairs_seconds(regions) if regions else None,
                           backward_s=backward_seconds(fields["wall_s"], fields["data_wait_s"], fields["copy_s"],
                                                       fields["sync_s"], fields["forward_s"], fields["optimizer_s"],
                                                       fields["loop_input_s"]))
                for fields, regions, _ in self._raw]

    @property
    def samples(self) -> list[HostSample]:
        """The background readings taken while the watched steps ran (all of them when none was watched)."""
        samples = list(self._sampler.samples) if self._sampler is not None else []
        if self._raw:
            first, last = self._raw[0][0], self._raw[-1][0]
            begin_s, end_s = first["start_s"], last["start_s"] + last["wall_s"]
            samples = [sample for sample in samples if begin_s <= sample.time_s <= end_s + 0.1] or samples
        return samples

    def observe(self, script_error: str | None = None, notes: Iterable[Note] = ()) -> Observation:
        """What was watched, typed, for `diagnose`: the one place an Observation is made from a run. `notes`
        (the caller's: an incomplete watch, say) come after the lines on what a step was."""
        cuda = self.device == "cuda"
        device = self.device or "cpu"
        if cuda and torch.cuda.is_initialized():
            device = f"cuda:{torch.cuda.current_device()} ({torch.cuda.get_device_name()})"
        lines = [*notes, *self.notes]
        if not cuda:
            lines += unmeasured(CPU_DEVICE)
        lines += profile_notes(self.profile_steps, self._profiler is not None, self.profile, bool(self._raw), cuda)
        lines += unmeasured(self._sampler.unmeasured if self._sampler is not None else ())
        memory, memory_notes = device_memory(cuda)
        arithmetic, arithmetic_notes = step_arithmetic(self.flop_count, cuda, self.warmup, self.model_size)
        if self.float64_seen and arithmetic is None:
            lines += unmeasured(["float64 operations per step: not counted; a float64 model input or parameter "
                                 "was seen"])
        batch_probe, probe_notes = self.after_watch()
        padding_trial, padding_notes = self._padded or (None, [])
        probe_notes = [*probe_notes, *padding_notes]
        if self.batch_size_source is not None:
            probe_notes = [Note("run", f"batch size: counted from {self.batch_size_source}"), *probe_notes]
        self.worker_memory.stop()
        if self.worker_memory.problem:
            probe_notes = [*probe_notes, Note("unmeasured", f"worker memory: {self.worker_memory.problem}")]
        watched = [(fields["batch_size"], held) for fields, _, held in self._raw]
        shape, shape_notes = step_shape(watched, self.contents, self.forward_batch_size, self.source,
                                        self.seen["optimizers"])
        restart_s = sum(held.restart_s for _, held in watched)
        loader = LoaderSettings(self.loader_workers, self.loader_pin_memory, restart_s, self.loader_parts)
        setup = setup_of(self.loader_origin, self._site_file(), bool(self.image_batches))
        return Observation(tuple(self.records), tuple(self.samples), device,
                           Host(os.cpu_count(), self.threads or torch.get_num_threads()), loader, memory,
                           ProfileWindow.of(self.profile), shape, self.float64_seen, self.autocast_seen, Ranks(),
                           tuple(shape_notes + lines + memory_notes + arithmetic_notes + probe_notes), script_error,
                           arithmetic=arithmetic, setup=setup, probe=batch_probe,
                           worker_memory=self.worker_memory.reading(), padding=self.padding_reading(padding_trial))

    def after_watch(self) -> tuple[BatchProbe | None, list[Note]]:
        """The measurements made once the watch is done: the batch probe (probe.py) of the captured forward and the
        padding trial (padding.py) of the captured call; the instrumentation runs them between steps (hooks.py), in
        the script's own settings, before the script goes on or is stopped. The probe's result (the padding
        trial's is kept for `observe`): None when no forward at a small batch was captured; a note when the loop
        ended before the watch was done (the model may be gone, and under several ranks a failed rank's job is
        being ended)."""
        if self._probed is None:
            result: tuple[BatchProbe | None, list[Note]] = (None, [])
            if isinstance(self.capture, probe.Capture):
                if self.done:
                    self.probing = True
                    try:
                        found, text = probe.run(self.capture, self._slowest_model_s())
                    finally:
                        self.probing = False
                    result = (found, [Note("run" if found is not None else "unmeasured", text)])
                else:
                    result = (None, [Note("unmeasured", f"{probe.SUBJECT}: not run, the loop ended before the "
                                                        f"watch was done")])
            self._measure_padding()
            if self.done or isinstance(self.capture, probe.Capture):
                self._probed, self.capture = result, False  # the copy of the batch is not kept past the probe
            else:
                return result
        return self._probed

    def _measure_padding(self) -> None:
        if self._padded is not None or not isinstance(self.padding_capture, padding.Capture):
            return
        if not self.done:
            self._padded = (None, [Note("unmeasured", f"{padding.SUBJECT}: not run, the loop ended before the "
                                                      f"watch was done")])
        else:
            self.probing = True
            try:
                trial, text = padding.measure(self.padding_capture, self._slowest_model_s())
            finally:
                self.probing = False
            self._padded = (trial, [Note("run" if trial is not None else "unmeasured", text)])
        self.padding_capture = False  # the copy of the batch is not kept past the trial

    def _slowest_model_s(self) -> float | None:
        """The slowest watched step's forward and backward (the trials' target: probe.time_inputs), or None."""
        parts = [r.forward_s + r.backward_s for r in self.records
                 if r.forward_s is not None and r.backward_s is not None]
        return max(parts) if parts else None

    def padding_reading(self, trial: PaddingTrial | None):
        """What the training batches' padding was and where it is made (padding.py), with the trial; None when no
        batch of token ids could tell its padding."""
        where, site = padding.source(self.padding, self.tokenizer_calls, self.collate_fn, bool(self.seen["batches"]))
        return self.padding.reading(where, site, trial)

    def _site_file(self) -> str | None:
        """The file of the line that asked for the training batches (call_site's), when known."""
        site = self.loader_site
        return site[0] if isinstance(site, tuple) and site and isinstance(site[0], str) else None


def device_memory(cuda: bool) -> tuple[MemoryReading, list[Note]]:
    """Peak allocated and total device memory and the caching allocator's retries (since the process began);
    Nones, with a note saying why, off CUDA or when unreadable."""
    if not cuda or not torch.cuda.is_initialized():
        why = "the device is the CPU" if not cuda else "CUDA never used"
        return MemoryReading(None, None, None), unmeasured([f"device memory: {why}"])
    try:
        device = torch.cuda.current_device()
        return MemoryReading(int(torch.cuda.max_memory_allocated(device)),
                             int(torch.cuda.get_device_properties(device).total_memory),
                             int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))), []
    except Exception as error:  # a build or device that cannot say: NA, not a crash
        return MemoryReading(None, None, None), unmeasured([f"device memory: unreadable ({type(error).__name__}: "
                                                           f"{error})"])
