"""The step's arithmetic: its FLOPs, counted once by torch's `FlopCounterMode`, by operator and precision, and the
device's peak for them. launch_overhead reads it (a step that does almost no arithmetic for its time) and
compute_bound chooses its advice from it (convolutions, matrix products and the precision they ran in).

Which step: the last warm-up step, the one just before the first watched step. The Watcher starts a `FlopCount`
at the boundary that opens that step and stops it at the boundary that closes it, before that boundary's time is
read, so no watched step runs under the counter; its cost (a Python call per dispatched operator) falls in a step
that is discarded anyway. With no warm-up step (warmup 0) nothing is counted, and a note says so. When a better
step clock takes over inside the counted step, the count is dropped and the new clock's last warm-up step counts.

FlopCounterMode only observes: a TorchDispatchMode that runs each operator as dispatched and reads the shapes
of its arguments (tests/doctor/test_flops.py trains a model with and without it and compares the weights
bitwise). It counts the FLOPs of torch's `flop_registry`: matrix products, convolutions and attention, each a
multiply-add as 2; elementwise operations, reductions and the optimizer's updates count 0. Each count is
recorded with the precision it ran in (the first tensor argument's dtype; on CUDA fp32 under TF32 is "tf32") and,
for a convolution, whether its input was channels_last. Limits: a CUDA graph replay dispatches no operator, so
its FLOPs are not seen; what it sees of a step compiled by inductor is not checked (a Linear compiled by dynamo
with a plain backend counts the same FLOPs as eager, and nothing recompiles).

The peak is hardware/peak.py's (a CPU's from hardware/cpus.json and its flags, all physical cores at the clock it
reads; a GPU's from hardware/gpus.json) for the precision that did most of the FLOPs, and whether the device
computes bf16 natively (a CPU's AMX-BF16 or AVX512-BF16 flags, as train's auto precision reads them), looked up
when the Observation is made (`step_arithmetic`), after the watch. Those imports, of `gpufeed.hardware.peak` and the
CPU probe, are the doctor's one arrow into hardware (docs/design.md, "Arrows between packages"): one
peak table for both.

For FLOPs per token (the report's `flops_per_token` beside `rule_flops_per_token`, findings/diagnose.py), the
counted step's token positions and sequence length are kept with its count (`keep`), and the step's model is read
at its first training forward as the 6N + 12·L·h·s rule reads it (`transformer_size`: N, N_t, and L and h from its
transformers config, measure/transformer_flops.py).
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils import _python_dispatch

from gpufeed.doctor.notes import Note
from gpufeed.doctor.observation import OperatorFlops, StepArithmetic, TransformerSize
from gpufeed.measure.transformer_flops import attention_shape, multiplied_parameters

SUBJECT = "FLOPs per step"  # the subject of the notes on the count
PEAK_SUBJECT = "peak FLOP/s"
_PRECISIONS = {torch.float64: "fp64", torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
CONVOLUTIONS = ("aten.convolution", "aten._convolution")  # forward: their input's layout is recorded


class FlopCount:
    """FlopCounterMode over one step: `start()` at the boundary that opens it, `stop()` at the one that closes
    it, then `keep(True)` when that step is the one wanted (else the counts are dropped): `counted` holds them.
    Never raises into the script: a failure is kept in `failure` and ends the counting."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self.counted: tuple[OperatorFlops, ...] | None = None  # the kept step's FLOPs, most first
        self.counted_tokens: tuple[int, int] | None = None  # the kept step's (token positions, sequence length)
        self._stopped: tuple[OperatorFlops, ...] | None = None  # the last step counted, until kept or dropped
        self._counter = None
        self._pending = None  # a counter that could not be left at its step's end (another mode above it)
        self._counts: Counter = Counter()

    def start(self) -> None:
        if self._counter is not None or self.failure is not None:
            return
        if _python_dispatch._get_current_dispatch_mode() is not None:
            self.failure = "not counted: the script's own TorchDispatchMode was active"
            return
        from torch.utils.flop_counter import FlopCounterMode, flop_registry

        self._counts = Counter()
        try:
            counter = FlopCounterMode(display=False, custom_mapping={
                packet: self.observed(str(packet), formula) for packet, formula in flop_registry.items()})
            counter.__enter__()
        except Exception as error:  # a torch without the counter's internals: say so, go on
            self.failure = f"not counted: FlopCounterMode failed ({type(error).__name__}: {error})"
            return
        self._counter = counter

    def keep(self, wanted: bool, tokens: tuple[int, int] | None = None) -> None:
        """Keep the step just stopped when `wanted`, with its (token positions, sequence length) when its batches
        held token ids; drop it either way from what the next `keep` sees."""
        if wanted and self._stopped is not None:
            self.counted, self.counted_tokens = self._stopped, tokens
        self._stopped = None

    def stop(self) -> None:
        counter, self._counter = self._counter, None
        if counter is not None:
            self._stopped = self._leave(counter)

    def _leave(self, counter) -> tuple[OperatorFlops, ...] | None:
        if _python_dispatch._get_current_dispatch_mode() is not counter.mode:  # leaving would pop another's mode
            self.failure = "not counted: a TorchDispatchMode the script entered in the counted step was still open"
            self._pending = counter
            return None
        try:
            counter.__exit__(None, None, None)
        except Exception as error:
            self.failure = f"not counted: FlopCounterMode failed ({type(error).__name__}: {error})"
            return None
        if self.failure is not None:  # a formula failed inside the step: the total would be short
            return None
        rows = [OperatorFlops(name, precision, layout, flops) for (name, precision, layout), flops in
                self._counts.items()]
        return tuple(sorted(rows, key=lambda row: (-row.flops, row.operator, row.precision)))

    def close(self) -> None:
        """Leave any counter still entered: the loop ended inside the counted step."""
        for counter in (self._counter, self._pending):
            if counter is not None:
                try:
                    counter.__exit__(None, None, None)
                except Exception:  # already broken: nothing more to undo
                    pass
        self._counter = self._pending = None

    def observed(self, name: str, formula):
        """`formula` (one of flop_registry's, taking the operator's arguments) that also records the FLOPs by
        operator, precision and layout, and turns its own failure into `failure` (0 FLOPs) instead of an error
        in the script's step."""
        def count(*args, out_val=None, **kwargs) -> int:
            try:
                flops = int(formula(*args, out_val=out_val, **kwargs))
                tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
                self._counts[(name, _precision(name, tensor), _channels_last(name, tensor))] += flops
                return flops
            except Exception as error:
                self.failure = self.failure or f"not counted: {name}'s formula failed ({type(error).__name__})"
                return 0
        count._get_raw = True  # FlopCounterMode passes the arguments as they are, not their shapes
        return count


def _precision(name: str, tensor: torch.Tensor | None) -> str:
    if tensor is None:
        return "unknown"
    precision = _PRECISIONS.get(tensor.dtype, str(tensor.dtype).removeprefix("torch."))
    if precision == "fp32" and tensor.is_cuda:
        convolution = "conv" in name  # cuDNN's switch; matrix products and attention have matmul's
        tf32 = torch.backends.cudnn.allow_tf32 if convolution else torch.backends.cuda.matmul.allow_tf32
        return "tf32" if tf32 else precision
    return precision


def _channels_last(name: str, tensor: torch.Tensor | None) -> bool | None:
    if name not in CONVOLUTIONS or tensor is None or tensor.dim() != 4:
        return None
    last, first = tensor.is_contiguous(memory_format=torch.channels_last), tensor.is_contiguous()
    return None if last == first else last


def device_peak(cuda: bool, precision: str) -> tuple[float | None, str]:
    """The device's dense peak FLOP/s in `precision` and its derivation (hardware/peak.py), or None and why."""
    from gpufeed.hardware.peak import cpu_peak, gpu_peaks  # the same peak table as bench's
    from gpufeed.hardware.probe import probe_cpu

    try:
        if cuda:
            peaks = [p for p in gpu_peaks(torch.cuda.get_device_name()) if p.precision == precision]
            peak = peaks[0] if peaks else None
        else:
            peak = cpu_peak(probe_cpu(), precision)
    except Exception as error:  # an unreadable CPU or catalog: NA, not a crash
        return None, f"unknown ({type(error).__name__}: {error})"
    if peak is None or peak.tflops is None:
        return None, f"unknown for {precision}" + (f" ({peak.derivation})" if peak is not None else "")
    return peak.tflops * 1e12, peak.derivation


def bf16_native(cuda: bool) -> bool | None:
    """The device computes bf16 natively, not emulated: a GPU from Ampere on (torch says), a CPU with AMX-BF16 or
    AVX512-BF16 (its flags, as train's auto precision reads them); None when the flags cannot be read."""
    if cuda:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    from gpufeed.hardware.na import is_na
    from gpufeed.hardware.probe import probe_cpu

    try:
        cpu = probe_cpu()
        flags = [cpu.amx_bf16, cpu.avx512_bf16]
    except Exception:  # an unreadable CPU: not known
        return None
    if any(flag is True for flag in flags):
        return True
    return None if any(is_na(flag) for flag in flags) else False


def transformer_size(module: torch.nn.Module) -> TransformerSize | None:
    """The step's model as the 6N + 12·L·h·s rule reads it: N and N_t (measure/transformer_flops.py's
    `multiplied_parameters`), L and h from its transformers `config` when it has one (a peft model reaches its
    base's); None when the model cannot be read (never an error in the script's step). A bitsandbytes 4-bit weight
    counts its packed elements, not the weights it packs."""
    try:
        return TransformerSize(multiplied_parameters(module), multiplied_parameters(module, trained=True),
                               attention_shape(getattr(module, "config", None)))
    except Exception:  # a get_input_embeddings that raises (NotImplementedError), say: no rule figure
        return None


def step_arithmetic(count: FlopCount, cuda: bool, warmup: int,
                    model: TransformerSize | None = None) -> tuple[StepArithmetic | None, list[Note]]:
    """The counted step's arithmetic with the device's peak, its tokens and `model` (the step's, when seen), and
    the notes on what is missing."""
    counted = count.counted
    if counted is None:
        why = count.failure or ("not counted: no warm-up step to count them in (warmup 0)" if warmup == 0
                                else "not counted: the warm-up steps did not complete")
        return None, [Note("unmeasured", f"{SUBJECT}: {why}; the step's arithmetic is not judged")]
    by_precision: Counter = Counter()
    for row in counted:
        by_precision[row.precision] += row.flops
    total = sum(by_precision.values())
    notes = []
    if total == 0:
        precision, peak, derivation = None, None, "no FLOPs counted"
    else:
        precision = max(by_precision, key=lambda name: (by_precision[name], name))
        peak, derivation = device_peak(cuda, precision)
        if peak is None:
            notes.append(Note("unmeasured", f"{PEAK_SUBJECT}: {derivation}; achieved FLOP/s is not compared "
                                            f"with the device's"))
    tokens, sequence_length = count.counted_tokens or (None, None)
    return StepArithmetic(total, counted, precision, peak, derivation, bf16_native(cuda), tokens, sequence_length,
                          model), notes
