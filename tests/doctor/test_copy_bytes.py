"""The doctor's host-to-device byte counting (observe/hooks.py), run on the CPU. The hooks patch `Tensor.to/.cuda/
.cpu/.copy_/.item/.tolist` only when CUDA is there, and decide a copy's direction by `is_cuda`; what they count once a
copy is seen (the source's elements times their size, pinned or not) needs no GPU. Here the hooks are installed with
`torch.cuda.is_available` saying yes, copies go into destinations that report themselves on the device, and each
step's `copy_bytes` and `copy_pageable_bytes` are compared with byte counts worked out by hand."""

from __future__ import annotations

import pytest
import torch

from gpufeed.doctor.observe.hooks import Instrumentation
from gpufeed.doctor.observe.watch import Watcher

PATCHED = ("to", "cuda", "cpu", "copy_", "item", "tolist")


class OnDevice(torch.Tensor):
    """A CPU tensor that says it is on the CUDA device: the side of a copy the hooks take for the GPU. Like a plain
    tensor (and `nn.Parameter`), it does not dispatch through `__torch_function__`."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self) -> bool:
        return True


class DispatchingOnDevice(torch.Tensor):
    """The same, with torch's default `__torch_function__`, as tensor subclasses such as torchvision's tv_tensors
    have: torch calls the patched method again from inside it."""

    @property
    def is_cuda(self) -> bool:
        return True


class Pinned(torch.Tensor):
    """A CPU tensor that says it is in pinned memory (a CPU-only torch cannot pin); it does not dispatch."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    def is_pinned(self, device=None) -> bool:
        return True


@pytest.fixture
def watched(monkeypatch):
    """A Watcher with its first step open (warm-up 0), and the hooks installed as on a machine with CUDA (the DataLoader
    left alone); removed after the test, which checks that torch's methods are back."""
    originals = {name: getattr(torch.Tensor, name) for name in PATCHED}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    watcher = Watcher(steps=3, warmup=0, profile_steps=0)
    watcher.step_boundary("manual")
    hooks = Instrumentation(watcher, patch_loader=False)
    hooks.install()
    try:
        yield watcher, hooks, originals
    finally:
        hooks.remove()
    assert all(getattr(torch.Tensor, name) is original for name, original in originals.items())


def to_device(source: torch.Tensor) -> None:
    """A copy of `source` into a tensor on the "device", through the patched `copy_`."""
    torch.empty(source.shape, dtype=source.dtype).as_subclass(OnDevice).copy_(source)


def close_step(watcher: Watcher):
    watcher.step_boundary("manual")
    return watcher.records[-1]


def test_a_nested_batch_moved_tensor_by_tensor_counts_every_byte_once(watched):
    """A dict batch of four dtypes, a strided view and a broadcast (expanded) tensor: each counts the elements it
    has times their size, what a copy sends, not the memory behind a view."""
    watcher, _, _ = watched
    base = torch.zeros(16, 10)
    batch = {"image": torch.zeros(8, 3, 32, 32, dtype=torch.uint8),  # 8 * 3 * 32 * 32 * 1 = 24,576
             "label": torch.zeros(8, dtype=torch.int64),  # 8 * 8 = 64
             "mask": torch.zeros(8, 32, dtype=torch.bool),  # 8 * 32 * 1 = 256
             "weight": torch.zeros(8, dtype=torch.float16),  # 8 * 2 = 16
             "every_other_column": base[:, ::2],  # 16 * 5 * 4 = 320 (its storage holds 640)
             "bias": torch.zeros(1, 64).expand(8, 64)}  # 8 * 64 * 4 = 2,048 (its storage holds 256)
    for tensor in batch.values():
        to_device(tensor)
    record = close_step(watcher)
    total = 24_576 + 64 + 256 + 16 + 320 + 2_048
    assert record.copy_bytes == total == 27_280
    assert record.copy_pageable_bytes == total  # none of it pinned
    assert record.copy_s > 0 and record.sync_count == 0
    assert watcher.device == "cuda"  # a copy to the device says the script uses CUDA


def test_pinned_sources_count_in_the_bytes_but_not_in_the_pageable_bytes(watched):
    watcher, _, _ = watched
    to_device(torch.zeros(64, 256).as_subclass(Pinned))  # 64 * 256 * 4 = 65,536
    to_device(torch.zeros(100, dtype=torch.float64))  # 100 * 8 = 800, pageable
    first = close_step(watcher)
    to_device(torch.zeros(5, 7, dtype=torch.bfloat16).as_subclass(Pinned))  # 70
    second = close_step(watcher)
    assert (first.copy_bytes, first.copy_pageable_bytes) == (65_536 + 800, 800)
    assert (second.copy_bytes, second.copy_pageable_bytes) == (70, 0)


def test_a_copy_back_to_the_host_is_a_wait_not_bytes(watched):
    watcher, _, _ = watched
    torch.empty(1000).copy_(torch.zeros(1000).as_subclass(OnDevice))
    record = close_step(watcher)
    assert (record.copy_bytes, record.copy_s) == (0, 0.0)
    assert record.sync_count == 1 and record.sync_s > 0


def test_the_patched_methods_count_host_to_device_copies_and_nothing_between_host_tensors(watched):
    """The hooks installed on the CPU: copies between host tensors (a dtype change, `.to("cpu")`, `.cpu()`, `copy_`)
    and `.item()`/`.tolist()` on the host count nothing; `copy_` into a tensor on the device counts its source's
    bytes (pageable); `copy_` back and `.item()` on the device are waits. `remove()` puts torch back (the fixture)."""
    watcher, _, originals = watched
    assert all(getattr(torch.Tensor, name) is not original for name, original in originals.items())
    host = torch.arange(128, dtype=torch.float32).view(16, 8)
    assert host.to(torch.float64).dtype == torch.float64
    assert host.to("cpu") is host and host.cpu() is host
    torch.empty(16, 8).copy_(host)
    host.sum().item()
    host[0].tolist()
    quiet = close_step(watcher)
    on_device = torch.empty(16, 8).as_subclass(OnDevice)
    on_device.copy_(host)  # 16 * 8 * 4 = 512 bytes to the device
    torch.empty(4, 8).as_subclass(OnDevice).copy_(host[::4])  # a strided source of 4 rows: 4 * 8 * 4 = 128
    torch.empty(16, 8).copy_(on_device)  # back to the host: a wait
    torch.zeros(1).as_subclass(OnDevice).item()  # the host reads a device value: a wait
    moved = close_step(watcher)
    assert (quiet.copy_bytes, quiet.sync_count) == (0, 0)
    assert (moved.copy_bytes, moved.copy_pageable_bytes) == (512 + 128, 512 + 128)
    assert moved.sync_count == 2


def test_a_copy_of_a_tensor_subclass_that_dispatches_is_counted_once(watched):
    """torch calls the patched method again from inside a subclass's `__torch_function__` (torchvision's tv_tensors
    have one): the inner call is the same copy and is not counted again."""
    watcher, _, _ = watched
    torch.empty(16, 8).as_subclass(DispatchingOnDevice).copy_(torch.ones(16, 8))  # 512 bytes
    torch.empty(16, 8).copy_(torch.ones(16, 8).as_subclass(DispatchingOnDevice))  # back: one wait
    record = close_step(watcher)
    assert (record.copy_bytes, record.sync_count) == (512, 1)
