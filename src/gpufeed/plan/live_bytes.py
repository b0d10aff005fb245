"""`LiveBytes`: a `TorchDispatchMode` that counts the storage bytes live on one device type, and their peak.

It sees each tensor an operation creates and counts its storage once, by nbytes (views share it), until a weak
reference says the last reference is gone: dropped by Python, by autograd (saved tensors go as the backward passes
them) or by autocast's weight cache. Each storage is rounded up to `block` bytes (the CUDA caching allocator's
512; 1 on the CPU). At each new peak it keeps what was live and the phase the caller set ("forward", ...), and
the same for each phase's own peak (`phase_peaks`: what was live at the most bytes seen while that phase was set,
from the moment it was set), so that the forward's and backward's peak and the optimizer step's can be told apart.
With `scratch_threads` set (a CPU plan), it also keeps `peak_with_scratch`: the most bytes live while an operator
runs plus the bound on the scratch its kernel allocates inside itself (kernel_scratch.py), which no trace sees.
Used by memory.py under `FakeTensorMode`, so nothing is allocated.
"""

from __future__ import annotations

import itertools
import weakref
from functools import partial

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from gpufeed.plan.kernel_scratch import scratch_bound


class LiveBytes(TorchDispatchMode):
    """Live storage bytes on one device type, each storage rounded up to `block`; the peak and what was live."""

    def __init__(self, device_type: str, block: int, scratch_threads: int = 0) -> None:
        super().__init__()
        self.device_type, self.block, self._phase = device_type, block, "setup"
        self.phase_peaks: dict[str, tuple[int, dict[int, int]]] = {}  # phase -> (rounded bytes, live) at its peak
        self.scratch_threads = scratch_threads  # 0: kernel scratch not bounded (a CUDA target)
        self.serials: WeakIdKeyDictionary = WeakIdKeyDictionary()  # storage -> serial number
        self.live: dict[int, int] = {}  # serial -> nbytes
        self.rounded = 0
        self.weight_copy_bytes = 0  # autocast's casts of parameters in the forward
        self.weight_copies: set[int] = set()  # their serials
        self._references: dict[int, weakref.ref] = {}
        self._numbers = itertools.count(1)
        self.reset_peak()

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, name: str) -> None:
        self._phase = name
        self._phase_peak()

    def _phase_peak(self) -> None:
        if self.rounded > self.phase_peaks.get(self._phase, (-1, None))[0]:
            self.phase_peaks[self._phase] = (self.rounded, dict(self.live))

    def reset_peak(self) -> None:
        """Peaks from now on: the overall one and every phase's."""
        self.peak_rounded, self.peak_live, self.peak_phase = self.rounded, dict(self.live), self.phase
        self.peak_with_scratch = self.rounded
        self.phase_peaks = {}
        self._phase_peak()

    def _round(self, nbytes: int) -> int:
        return -(-nbytes // self.block) * self.block

    def add(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        if tensor.device.type != self.device_type or storage in self.serials:
            return
        serial = self.serials[storage] = next(self._numbers)
        self.live[serial] = storage.nbytes()
        self.rounded += self._round(storage.nbytes())
        self._references[serial] = weakref.ref(storage, partial(self._free, serial))
        if self.rounded > self.peak_rounded:
            self.peak_rounded, self.peak_live, self.peak_phase = self.rounded, dict(self.live), self.phase
            self.peak_with_scratch = max(self.peak_with_scratch, self.rounded)
        self._phase_peak()

    def _free(self, serial: int, _reference: weakref.ref) -> None:
        self.rounded -= self._round(self.live.pop(serial))
        del self._references[serial]

    def serials_of(self, tensors) -> set[int]:
        found = (self.serials.get(t.untyped_storage()) for t in tensors if isinstance(t, torch.Tensor))
        return {serial for serial in found if serial is not None}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        source = args[0] if args else None
        weight_copy = func is torch.ops.aten._to_copy.default and self.phase == "forward" \
            and isinstance(source, torch.Tensor) and source.is_leaf and source.requires_grad
        if weight_copy:
            self.weight_copy_bytes += out.untyped_storage().nbytes()
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.add(leaf)
        if weight_copy:
            self.weight_copies |= self.serials_of([out])
        if self.scratch_threads:
            scratch = scratch_bound(func, args, self.scratch_threads)
            self.peak_with_scratch = max(self.peak_with_scratch, self.rounded + scratch)
        return out
