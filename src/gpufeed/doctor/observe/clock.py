"""What one step holds: its training batches and their size, the samples of a step when no DataLoader says, and
the report's lines that say what a "step" was when that is not one batch through one optimizer.

A step is one tick of the step clock (watch.py): one `optimizer.step()` of the first optimizer to step, when any
steps (with two, as in a GAN, the other's steps fall inside it). With gradient accumulation one step holds several
batches, so the report's batch size and samples/s count the samples of a step, while small_batch judges the batch
the model sees (findings/kinds/small_batch.py).

- Training batches: each batch is named by the line that asked for it (the first frame outside torch and gpufeed:
  the training loop's `for`, an `evaluate()`'s `for`, a `next(batches)`), which stays the same when a loader or
  its dataset is rebuilt each epoch. A line feeds the steps when it handed out a batch in at least half of the
  last RECENT_STEPS steps of the clock that took any batch. Batches from other lines (a validation pass every few
  steps) add no data wait and no samples: their time is step time, and a periodic one shows as a stall. Until a
  step of the clock closes, and under the loader clock alone, every batch counts. Two loaders read on every step
  (semi-supervised) both count; a validation pass on every other step or more often counts as training.
- Image batches: whether the training batches are (images, labels) (`image_batch`, the first training batch's), so
  that input_bound may advise packing the loader's Dataset with `gpufeed.pack` (frameworks/setup.py).
- Without loader batches: the samples of a step are the rows that went through the step's first module (the
  model, called first; a loss module called after it is not counted) in outermost forwards with grad enabled,
  summed over the step (nanoGPT's micro-steps). They are counted in the first complete step of the clock; the
  instrumentation drops its forward hooks after that one (hooks.py).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from gpufeed.doctor.notes import Note
from gpufeed.doctor.observation import StepShape
from gpufeed.doctor.patching import first_tensor

CLOCKS = {"optimizer": "one optimizer.step()", "manual": "one w.step()", "loader": "one DataLoader batch",
          "forward": "one forward with grad after a backward pass"}
# gpufeed's choice: the steps over which a line must hand out batches at least half the time to feed the steps: long
# enough that a validation every 3 steps or less often stays out, short enough that a new training loop (a second
# phase) counts after 4 steps.
RECENT_STEPS = 8


def _leading_dims(value: Any, found: list[int]) -> None:
    if isinstance(value, torch.Tensor):
        if value.dim() > 0:
            found.append(int(value.shape[0]))
        return
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        _leading_dims(item, found)


def image_batch(batch: Any) -> bool:
    """An (images, labels) batch: two items, a 4-D uint8 or floating tensor (B, C, H, W or B, H, W, C) and a 1-D
    integer tensor of as many labels; what `gpufeed.pack` makes of a Dataset's (image, label) items."""
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        return False
    images, labels = batch
    return (isinstance(images, torch.Tensor) and isinstance(labels, torch.Tensor) and images.dim() == 4
            and (images.dtype == torch.uint8 or images.is_floating_point()) and labels.dim() == 1
            and not labels.is_floating_point() and labels.dtype != torch.bool and len(labels) == len(images))


def loader_batch_size(iterator: Any) -> int | None:
    """A DataLoader iterator's own batch_size (its batch sampler's), or None: not a DataLoader iterator, batching
    off (batch_size=None), or a batch sampler without one."""
    if not getattr(iterator, "_auto_collation", False):
        return None
    size = getattr(getattr(iterator, "_index_sampler", None), "batch_size", None)
    return size if isinstance(size, int) else None


def counted_by(batch: Any, loader_batch_size: int | None) -> str:
    """How `batch_size_of` counts this batch's samples, in words (the report's note)."""
    if loader_batch_size is not None:
        return "the DataLoader's batch_size"
    dims: list[int] = []
    _leading_dims(batch, dims)
    return "the leading dimension most of the batch's tensors agree on" if dims else "the length of its labels"


def batch_size_of(batch: Any, loader_batch_size: int | None = None) -> int | None:
    """Samples in a batch: the DataLoader's own batch_size when the batch came from one with it set (capped by
    the batch's tensors' largest leading dimension: an epoch's last batch may be short), else the leading dimension
    most of the batch's tensors agree on (an EmbeddingBag batch `(ids, offsets, labels)` flattens its ids, so the
    first tensor's length is not the samples; ties go to the first tensor), else the length of its last item (the
    labels, as a list), else None."""
    dims: list[int] = []
    _leading_dims(batch, dims)
    if loader_batch_size is not None:
        return min(loader_batch_size, max(dims)) if dims else loader_batch_size
    if dims:
        counts = Counter(dims)
        best = max(counts.values())
        return next(dim for dim in dims if counts[dim] == best)
    tensor = first_tensor(batch)
    if tensor is not None:
        return None  # only 0-d tensors
    items = list(batch.values()) if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else []
    labels = items[-1] if items else None
    return len(labels) if isinstance(labels, (list, tuple)) else None


class Held(NamedTuple):
    """What one closed step held besides its StepRecord."""

    sizes: list[int | None]  # its training batches' sizes (None: unknown)
    restart_s: float  # of its data wait, the seconds in a training loader's __iter__ or final StopIteration


class StepContents:
    """The current step's training batches and model rows, and what the run has shown about them so far. A batch's
    `site` is any hashable naming where it was asked for (None for the loader `watch()` wraps)."""

    def __init__(self) -> None:
        self.sizes: list[int | None] = []  # the current step's training batches (None: size unknown)
        self.restart_s = 0.0  # the current step's seconds in a training loader's __iter__ or final StopIteration
        self.other_batches = 0  # batches from sites that do not feed the steps
        self.rows_per_step: Counter = Counter()  # complete steps' rows through the first module (no loader)
        self._sites: set = set()  # the sites that handed out a batch in the current step
        self._recent: deque = deque(maxlen=RECENT_STEPS)  # the same, for the latest steps of the clock with one
        self._model: int | None = None  # id of the step's first module with grad
        self._rows = 0

    def is_training(self, site: Any) -> bool:
        if not self._recent:
            return True
        return 2 * sum(1 for sites in self._recent if site in sites) >= len(self._recent)

    def on_batch(self, site: Any, size: int | None, training: bool) -> None:
        self._sites.add(site)
        if training:
            self.sizes.append(size)
        else:
            self.other_batches += 1

    def on_forward(self, module: int, rows: int) -> bool:
        """An outermost forward with grad returned; True when it is the step's model (its first module)."""
        if self._model is None:
            self._model = module
        if module != self._model:
            return False
        self._rows += rows
        return True

    def close(self, clock: bool, complete: bool) -> Held:
        """End the step: `clock`, ended by a clock other than the loader's; `complete`, a whole step of the
        clock (else its first boundary: a new clock, whose steps may hold more rows)."""
        if clock and self._sites:
            self._recent.append(frozenset(self._sites))
        if not complete:
            self.rows_per_step.clear()
        elif self._rows and not self.sizes:
            self.rows_per_step[self._rows] += 1
        held = Held(self.sizes, self.restart_s)
        self.sizes, self.restart_s, self._sites, self._model, self._rows = [], 0.0, set(), None, 0
        return held


def batch_shape(steps: list[Held]) -> tuple[int | None, int | None]:
    """(training batches per step, samples per batch), each the most common over the steps that took a batch;
    Nones without one."""
    counts = Counter(len(step.sizes) for step in steps if step.sizes)
    sizes = Counter(size for step in steps for size in step.sizes if size is not None)
    return (counts.most_common(1)[0][0] if counts else None, sizes.most_common(1)[0][0] if sizes else None)


def step_shape(steps: list[tuple[int | None, Held]], contents: StepContents, forward_batch: int | None,
               source: str | None, optimizers: int) -> tuple[StepShape, list[Note]]:
    """What a step held, from the watched steps (each its record's batch size and what it held), and the notes
    on what a step was (about the run)."""
    sizes = Counter(size for size, _ in steps if size is not None)
    batches_per_step, loader_batch = batch_shape([held for _, held in steps])
    rows = contents.rows_per_step.most_common(1)[0][0] if contents.rows_per_step else None
    model_rows = (rows or forward_batch, forward_batch) if forward_batch else None
    step_samples = sizes.most_common(1)[0][0] if sizes else None
    lines = clock_lines(source, batches_per_step, loader_batch, step_samples, optimizers, contents.other_batches,
                        None if sizes else model_rows)
    shape = StepShape(step_samples if sizes else model_rows and model_rows[0], batches_per_step, loader_batch)
    return shape, [Note("run", line) for line in lines]


def clock_lines(source: str | None, batches_per_step: int | None, batch: int | None, step_samples: int | None,
                optimizers: int, other_batches: int, model_rows: tuple[int, int] | None) -> list[str]:
    """The report's lines on what a step was: several batches per step (`batch`: the most common batch size,
    `step_samples`: a step's), several optimizers, batches from other loops left out, samples read from the
    model's input (`model_rows`: rows per step, rows of one forward). Empty for one batch through one optimizer."""
    clock = CLOCKS.get(source or "", "one step")
    lines = []
    if batches_per_step is not None and batches_per_step > 1:
        of = f" of {batch}" if batch is not None else ""
        total = f"the {step_samples} samples" if step_samples is not None else "the samples"
        lines.append(f"samples per step: a step is {clock} and took {batches_per_step} DataLoader batches{of} "
                     f"(gradient accumulation, or a batch from each of several loaders); batch size and samples/s "
                     f"count {total} of a step, small_batch judges one batch{of}")
    if source == "optimizer" and optimizers > 1:
        lines.append(f"step clock: {optimizers} optimizers stepped; a step is one step of the first to step, and the "
                     f"others' steps fall inside it")
    if other_batches:
        lines.append(f"other DataLoaders: {other_batches} batch{'es' if other_batches > 1 else ''} came from a loop "
                     f"that does not feed the steps (validation, say); their wait is step time, not data wait, and "
                     f"their samples are not counted")
    if batches_per_step is None and model_rows is not None:
        per_step, one = model_rows
        how = (f"the {per_step} rows that went through the model with grad ({one} in one forward: gradient "
               f"accumulation)" if per_step != one else f"the {one} rows of the model's first input")
        lines.append(f"samples per step: no DataLoader batch in the watched steps; a step is {clock}, and its "
                     f"samples are {how}, counted in the first step")
    return lines
