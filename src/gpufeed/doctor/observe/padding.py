"""Padding in batches of token ids: counted on the host as each training batch arrives, traced to where it is
made, and its cost measured on the user's own model after the watch.

- `span(batch, pad_token_id)`: a batch's rows, width, the span from its first to its last column holding a real
  token in some row (right or left padding: columns that are padding in every row are cut at either end), and each
  row's real tokens; real from the attention mask, else the model's pad id (tokens.py's rule). None for a batch
  without token ids, or whose padding cannot be told.
- `trimmed(value, pad_token_id, encoder_decoder)`: a batch (a mapping, a tuple, the model's keyword or positional
  arguments) with every tensor of the ids' width cut to that span; an encoder-decoder's `labels` and `decoder_*`
  tensors cut by their own padding (the decoder's mask, else the labels' IGNORE_INDEX and pad ids), as a collator
  that pads to the longest would have made them. What `--try` serves (trials/changes.py) and what the trial times.
  Cutting changes no real token's result: padding is masked out of attention and of the loss (IGNORE_INDEX), so a
  batch cut to its longest row trains as the padded one does (left padding shifts absolute positions by the cut,
  as a collator padding to the longest does).
- `Tally`: the watcher's sums over the training batches (positions, kept, real, widths, row lengths).
- `TokenizerCalls`: transformers' tokenizer `__call__` and `pad` patched while the doctor watches (at once, or when
  transformers.tokenization_utils_base is imported: patching.when_imported), recording the first user line that asked
  for each padding strategy (`padding="max_length"` or `pad_to_max_length=True`, `"longest"` or True), as
  frameworks/setup.py records where loaders are built: from the calls, never from the script's text.
- `source(...)`: where the padding is made, in words, from what was seen (first that holds): a tokenizer call with
  padding="max_length" whose max_length is a width the batches came in; a collator whose `padding` is
  "max_length" (transformers' DataCollatorWithPadding, the Trainer's data_collator); a collator whose
  `pad_to_multiple_of` is above SMALL_MULTIPLE and divides every batch's width (TRL's collator); the loader's collate
  function, at its line when it is the user's, when the batches come in one width while their rows' lengths vary;
  the loop's own batches (no DataLoader); else "not found".
- `Capture` and `measure`: the step's model and a copy of its inputs at the first watched step whose batch has
  columns to cut, kept by the watcher (watch.py); after the watch, with the batch probe (probe.py's `attempt`: rank
  0, memory, state saved and restored, interleaved rounds, the script's own loss), a forward and backward on the
  batch as it came and cut: a `PaddingTrial` (observation.py). On the CPU, when the fastest runs on the script's
  intra-op threads still waited for a core (observation.waited_too_long: another process's burst, which made the
  cut batch of a CI run slower than the batch as it came, 1,102 ms against 518, 1,123 and 486 ms of them waits), it
  is timed again on one thread, each run's time that thread's CPU time (probe.attempt's `alone`): a GPT-2 of 2
  layers on 8 x 128 ids cut to 37 ran 62.2 and 16.5 ms so beside two spinning processes, 59.7 and 16.5 on a quiet
  machine (73% and 72% saved; 40.1 and 11.2 ms, 72%, on two threads quiet; wall times 85.4 and 24.3 on two threads
  beside the spinners; the fastest of 8 each, a 2-vCPU Xeon VM, torch 2.13, 2026-12-05). Its ratio is the
  work's; `PaddingTrial.threads` says so.
"""

from __future__ import annotations

import functools
import statistics
import sys
import weakref
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from gpufeed.doctor.observation import PaddingReading, PaddingTrial, waited_too_long
from gpufeed.doctor.observe import probe
from gpufeed.doctor.observe.tokens import ids_and_mask

IGNORE_INDEX = -100  # the label torch's cross_entropy and transformers' losses leave out (ignore_index)
SUBJECT = "padding trial"  # the notes' subject
TOKENIZER_MODULE = "transformers.tokenization_utils_base"
MAX_LENGTHS_KEPT = 100_000  # row lengths kept for the median: a bound on the watcher's memory
DECODER_KEYS = ("labels", "decoder_input_ids", "decoder_attention_mask")
# A collator's pad_to_multiple_of up to 8 is the width alignment NVIDIA's tensor cores want (their "Deep Learning
# Performance" guide: sequence lengths in multiples of 8 for fp16/bf16), a few positions a row: not named as the
# padding's source; one above it that every batch's width is a multiple of (TRL's SFTConfig(pad_to_multiple_of=
# 512), say) is.
SMALL_MULTIPLE = 8


@dataclass(frozen=True)
class Span:
    """A batch's ids: `rows` x `width`, real tokens only in columns [start, stop) (`kept` = stop - start wide),
    each row's real tokens in `lengths`."""

    rows: int
    width: int
    start: int
    stop: int
    lengths: tuple[int, ...]

    @property
    def kept(self) -> int:
        return self.stop - self.start

    @property
    def cuttable(self) -> bool:
        return self.kept < self.width


def _real(ids: torch.Tensor, mask: torch.Tensor | None, pad_token_id: int | None) -> torch.Tensor | None:
    if mask is not None:
        return mask != 0
    return ids != pad_token_id if pad_token_id is not None else None


def _span_of(real: torch.Tensor) -> Span:
    rows, width = int(real.shape[0]), int(real.shape[1])
    columns = real.any(dim=0).nonzero().flatten()
    start, stop = (int(columns[0]), int(columns[-1]) + 1) if columns.numel() else (0, 0)
    return Span(rows, width, start, stop, tuple(int(n) for n in real.sum(dim=1).tolist()))


def span(batch: Any, pad_token_id: int | None, device: bool = False) -> Span | None:
    """The batch's span (the module docstring), or None; ids on a device are read only with `device` (after the
    watch: reading them waits for the device)."""
    found = ids_and_mask(batch)
    if found is None:
        return None
    ids, mask = found
    if not device and (ids.device.type != "cpu" or (mask is not None and mask.device.type != "cpu")):
        return None
    real = _real(ids, mask, pad_token_id)
    return None if real is None else _span_of(real)


def _decoder_span(batch: Mapping, pad_token_id: int | None) -> Span | None:
    """The span of an encoder-decoder's labels by their own padding: the decoder's mask, else labels that are
    neither IGNORE_INDEX nor the pad id."""
    mask = batch.get("decoder_attention_mask")
    labels = batch.get("labels")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        return _span_of(mask != 0)
    if isinstance(labels, torch.Tensor) and labels.dim() == 2 and not labels.is_floating_point():
        real = labels != IGNORE_INDEX
        if pad_token_id is not None:
            real &= labels != pad_token_id
        return _span_of(real)
    return None


def _cut(value: Any, width: int, start: int, stop: int, skip: tuple[str, ...] = ()) -> Any:
    """`value` with every tensor of at least 2 dimensions whose second is `width` cut to [start, stop) along it;
    mapping keys in `skip` left as they are. The cut is contiguous, as a collator's batch padded to its longest row
    is (a model may .view() its labels: T5's loss does)."""
    if isinstance(value, torch.Tensor):
        return value[:, start:stop].contiguous() if value.dim() >= 2 and value.shape[1] == width else value
    if isinstance(value, Mapping):
        return {key: item if key in skip else _cut(item, width, start, stop) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_cut(item, width, start, stop) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    return value


def trimmed(value: Any, pad_token_id: int | None, encoder_decoder: bool = False,
            device: bool = False) -> tuple[Any, Span, Span | None] | None:
    """`value` cut to its span (the module docstring), its span, and an encoder-decoder's decoder span; None when
    it holds no token ids whose padding can be told, or nothing is cut. `device`: as `span`'s."""
    found = span(value, pad_token_id, device)
    if found is None:
        return None
    decoder = None
    if encoder_decoder and isinstance(value, Mapping):
        decoder = _decoder_span(value, pad_token_id)
    decoder_cut = decoder is not None and decoder.cuttable
    if not found.cuttable and not decoder_cut:
        return None
    skip = DECODER_KEYS if decoder is not None else ()
    result = _cut(value, found.width, found.start, found.stop, skip)
    if decoder is not None:
        for key in DECODER_KEYS:
            if isinstance(value.get(key), torch.Tensor):
                result[key] = _cut(value[key], decoder.width, decoder.start, decoder.stop)
    return result, found, decoder


def model_input_trimmed(args: tuple, kwargs: dict, pad_token_id: int | None, encoder_decoder: bool,
                        device: bool = False) -> tuple[tuple, dict, Span, Span | None] | None:
    """The model's call cut (keyword arguments when they hold input_ids, else the positional ones), or None."""
    if "input_ids" in kwargs:
        found = trimmed(kwargs, pad_token_id, encoder_decoder, device)
        return None if found is None else (args, found[0], found[1], found[2])
    found = trimmed(args, pad_token_id, encoder_decoder, device)
    return None if found is None else (found[0], kwargs, found[1], found[2])


def encoder_decoder_of(module: Any) -> bool:
    """The model's transformers config says it is an encoder-decoder (T5, BART)."""
    return getattr(getattr(module, "config", None), "is_encoder_decoder", False) is True


class Tally:
    """The watcher's sums over training batches of token ids whose padding can be told."""

    def __init__(self) -> None:
        self.batches = self.positions = self.kept = self.real = 0
        self.widths: Counter = Counter()
        self.lengths: list[int] = []
        self.shortest: int | None = None
        self.longest: int | None = None

    def add(self, found: Span) -> None:
        self.batches += 1
        self.positions += found.rows * found.width
        self.kept += found.rows * found.kept
        self.real += sum(found.lengths)
        self.widths[found.width] += 1
        if found.lengths:
            self.shortest = min(self.shortest if self.shortest is not None else found.width, min(found.lengths))
            self.longest = max(self.longest or 0, max(found.lengths))
            self.lengths.extend(found.lengths[:max(0, MAX_LENGTHS_KEPT - len(self.lengths))])

    def reading(self, source: str, site: str | None, trial: PaddingTrial | None) -> PaddingReading | None:
        if not self.batches or not self.positions:
            return None
        return PaddingReading(self.batches, self.positions, self.kept, self.real, tuple(sorted(self.widths)),
                              self.shortest or 0, float(statistics.median(self.lengths)) if self.lengths else 0.0,
                              self.longest or 0, source, site, trial)


# --- where the padding is made ----------------------------------------------------------------------------------
def padding_asked(args: tuple, kwargs: dict) -> str | None:
    """The padding strategy a tokenizer call asked for: "max_length", "longest", or None (none)."""
    padding = kwargs.get("padding", False)
    if kwargs.get("pad_to_max_length"):
        return "max_length"
    value = getattr(padding, "value", padding)  # transformers' PaddingStrategy enum
    if value in ("max_length",):
        return "max_length"
    if value is True or value == "longest":
        return "longest"
    return None


class TokenizerCalls:
    """Records, per padding strategy, the first user line that asked a transformers tokenizer for it and the
    max_length asked (the module docstring). Installed into the instrumentation's patches list, like
    frameworks/setup.py's Constructions."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[str, int, int | None]] = {}  # strategy -> (file, line, max_length)
        self._finder = None
        self.problems: list[str] = []

    def install(self, patches: list) -> None:
        from gpufeed.doctor.patching import when_imported

        self._patches = patches
        self._finder = when_imported(TOKENIZER_MODULE, self._patch)

    def remove(self) -> None:
        from gpufeed.doctor.patching import forget

        forget(self._finder)
        self._finder = None

    def _patch(self, module) -> None:
        from gpufeed.doctor.patching import Patch

        base = getattr(module, "PreTrainedTokenizerBase", None)
        if base is None:
            self.problems.append("tokenizer calls: this transformers has no PreTrainedTokenizerBase to patch")
            return
        try:  # inside the script's import of transformers (the import hook): never its problem
            for name in ("__call__", "pad"):
                self._patches.append(Patch(base, name, self._wrap))
        except Exception as error:
            self.problems.append(f"tokenizer calls: not patched ({type(error).__name__}: {error})")

    def _wrap(self, original):
        calls = self

        @functools.wraps(original)
        def wrapper(tokenizer, *args, **kwargs):
            strategy = padding_asked(args, kwargs)
            if strategy is not None and strategy not in calls.seen:
                try:
                    calls.record(strategy, kwargs.get("max_length"), sys._getframe(1))
                except Exception as error:  # never the user's script's problem
                    calls.problems.append(f"tokenizer call not recorded ({type(error).__name__}: {error})")
            return original(tokenizer, *args, **kwargs)
        return wrapper

    def record(self, strategy: str, max_length: Any, frame) -> None:
        from gpufeed.doctor.patching import user_frame

        user, _ = user_frame(frame)
        if user is not None:
            length = max_length if isinstance(max_length, int) else None
            self.seen[strategy] = (user.f_code.co_filename, user.f_lineno, length)


def _relative(file: str, line: int) -> str:
    from gpufeed.doctor.patching import shown_path

    return f"{shown_path(file)}:{line}"


def _user_function(function: Any) -> tuple[str, str] | None:
    """(its name, "file:line") for a collate function defined in the user's code, or None."""
    from gpufeed.doctor.patching import library_file

    code = getattr(function, "__code__", None)
    if code is None or library_file(code.co_filename):
        return None
    return function.__qualname__, _relative(code.co_filename, code.co_firstlineno)


def collator_of(collate_fn: Any) -> Any:
    """The collator inside the doctor's own timing wrapper (loader_split.TimedCollate) and the Trainer's
    column-removing one (`data_collator`), or the collate function."""
    from gpufeed.doctor.observe.loader_split import TimedCollate  # loaded: the watcher installed it

    while isinstance(collate_fn, TimedCollate):
        collate_fn = collate_fn.collate_fn
    inner = getattr(collate_fn, "data_collator", None)
    return inner if inner is not None else collate_fn


def source(tally: Tally, calls: TokenizerCalls, collate_fn: Any, loader_seen: bool) -> tuple[str, str | None]:
    """Where the padding is made, in words, and the user's line when known (the module docstring's order)."""
    widths = set(tally.widths)
    asked = calls.seen.get("max_length")
    if asked is not None and (asked[2] is None or asked[2] in widths):
        return 'the tokenizer\'s padding="max_length"', _relative(asked[0], asked[1])
    collator = collator_of(collate_fn) if collate_fn is not None else None
    padding = getattr(getattr(collator, "padding", None), "value", getattr(collator, "padding", None))
    if padding == "max_length":
        return f'the collator {type(collator).__name__}(padding="max_length")', None
    multiple = getattr(collator, "pad_to_multiple_of", None)
    if isinstance(multiple, int) and multiple > SMALL_MULTIPLE and widths and all(w % multiple == 0 for w in widths):
        return f"the collator {type(collator).__name__}(pad_to_multiple_of={multiple})", None
    fixed = len(widths) == 1 and tally.shortest is not None and tally.longest is not None \
        and tally.longest < max(widths)
    if not loader_seen:
        longest = calls.seen.get("longest")
        site = _relative(asked[0], asked[1]) if asked is not None else \
            _relative(longest[0], longest[1]) if longest is not None else None
        return "the loop's own batches", site
    if collator is not None and fixed:
        user = _user_function(collator)
        if user is not None:
            return f"the collate function {user[0]}", user[1]
        return f"the collator {type(collator).__name__}", None
    if collator is not None:
        user = _user_function(collator)
        name = f"the collate function {user[0]}" if user is not None else f"the collator {type(collator).__name__}"
        return f"{name} (padding each batch to its longest row)", user[1] if user is not None else None
    return "not found", None


# --- the trial after the watch ----------------------------------------------------------------------------------
class Capture:
    """The step's model (weakly) and a detached copy of its inputs at a watched call of token ids, the model's pad
    id and whether it is an encoder-decoder; `autocast` as probe.Capture's. The cut is made in `measure`, after
    the watch: on a device, finding the columns to cut reads the ids back (a wait the watched steps must not
    have)."""

    def __init__(self, module: torch.nn.Module, args: tuple, kwargs: dict, pad_token_id: int | None,
                 autocast) -> None:
        self.module = weakref.ref(module)
        self.args, self.kwargs = probe.copied(args), probe.copied(kwargs)
        self.pad_token_id, self.encoder_decoder = pad_token_id, encoder_decoder_of(module)
        self.autocast = autocast


def capture(module: torch.nn.Module, args: tuple, kwargs: dict, pad_token_id: int | None,
            cuttable: bool) -> Capture | str | None:
    """A Capture of this call of the step's model when it holds token ids and its batch has columns to cut: on the
    host, read here; on a device, as the step's loader batch said (`cuttable`). None when not; a note's text when
    it cannot be measured (autocast whose dtype cannot be read)."""
    found = ids_and_mask(kwargs if "input_ids" in kwargs else args)
    if found is None:
        return None
    on_host = found[0].device.type == "cpu" and (found[1] is None or found[1].device.type == "cpu")
    if on_host and model_input_trimmed(args, kwargs, pad_token_id, encoder_decoder_of(module)) is None:
        return None
    if not on_host and not cuttable:
        return None
    autocast = probe.autocast_now()
    if isinstance(autocast, str):
        return f"{SUBJECT}: not run, {autocast}"
    return Capture(module, args, kwargs, pad_token_id, autocast)


def measure(captured: Capture, watched_s: float | None = None) -> tuple[PaddingTrial | None, str]:
    """Time the captured batch as it came and cut (the module docstring); (the trial or None, the note).
    `watched_s`: the slowest watched step's forward and backward (probe.time_inputs' target for the batch as it
    came)."""
    module = captured.module()
    if module is None:
        return None, f"{SUBJECT}: not run, the model was gone by the end of the watch"
    cut = model_input_trimmed(captured.args, captured.kwargs, captured.pad_token_id, captured.encoder_decoder,
                              device=True)
    if cut is None:
        return None, f"{SUBJECT}: not run, the captured batch has no column that is padding in every row"
    cut_args, cut_kwargs, found, decoder = cut
    inputs = [(captured.args, captured.kwargs), (cut_args, cut_kwargs)]
    timed = probe.attempt(module, inputs, captured.autocast, SUBJECT, "the batch as it came", watched_s,
                          order=(1, 0), unwaited=True)
    if isinstance(timed, str):
        return None, timed
    (seconds, cut_seconds), rounds, waited = timed
    decoder_words = f"; its labels {decoder.width} to {decoder.kept}" if decoder is not None else ""
    note = (f"{SUBJECT}: after the watch, a forward and backward of the model (no optimizer step; gradients, "
            f"buffers and RNG restored after) on a watched batch of {found.rows} rows as it came, {found.width} "
            f"positions wide, and cut to its longest row, {found.kept} wide{decoder_words}; the fastest of "
            f"{rounds}: {1000 * seconds:.2f} ms and {1000 * cut_seconds:.2f} ms"
            + ("" if not any(waited) else
               f" (waiting for cores: {1000 * waited[0]:.2f} and {1000 * waited[1]:.2f} ms)"))
    threads = None
    parameter = next(module.parameters(), None)
    on_cpu = parameter is not None and parameter.device.type == "cpu"
    if on_cpu and any(waited_too_long(s, w) for s, w in zip((seconds, cut_seconds), waited, strict=True)):
        alone = probe.attempt(module, inputs, captured.autocast, SUBJECT, "the batch as it came", order=(1, 0),
                              alone=True)
        if isinstance(alone, str):
            note += f"; on one thread, {alone.removeprefix(SUBJECT + ': ')}"
        else:
            (seconds, cut_seconds), rounds, waited = alone
            threads = 1
            note += (f"; its fastest runs waited for a core (other processes held the cores, and each operator "
                     f"waits for its slowest thread), so it ran again on one thread, each run's time that thread's "
                     f"CPU time: the fastest of {rounds}: {1000 * seconds:.2f} ms and "
                     f"{1000 * cut_seconds:.2f} ms (beyond it on the clock: {1000 * waited[0]:.2f} and "
                     f"{1000 * waited[1]:.2f} ms)")
    trial = PaddingTrial(found.rows, found.width, found.kept, seconds, cut_seconds, rounds,
                         decoder.width if decoder is not None else None, decoder.kept if decoder is not None else None,
                         threads)
    return trial, note
