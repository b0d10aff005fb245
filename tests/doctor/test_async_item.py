"""The "async_item" experiment (async_item.py): per call site, a device read returns the site's previous value.

On the CPU the logic runs with fake device operations (`FakeDevice`) and `on_device` saying yes to CPU tensors, so
the real patch of `Tensor.item`/`.tolist` and the real call sites are exercised; the expected values are the
sequences worked out by hand from "first call real, then the previous call's value". The CUDA operations and the
gain on tests/doctor/scripts/gpu_item_sync.py need a GPU and skip without one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from gpufeed.cli.main import main
from gpufeed.doctor.runs.script import Script, WatchSettings
from gpufeed.doctor.trials.async_item import ASYNC_ITEM, MOST_LISTED, CudaCopies, StaleReads, defer_reads
from gpufeed.doctor.trials.changes import Changes
from gpufeed.doctor.trials.runs import run_once, run_trial

SCRIPTS = Path(__file__).parent / "scripts"
ORIGINALS = {name: getattr(torch.Tensor, name) for name in ("item", "tolist", "copy_")}
on_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class FakeDevice:
    """Copies that are CPU clones, numbered from 0; those numbered in `late` have not landed when asked."""

    def __init__(self, late: tuple[int, ...] = ()):
        self.late, self.copies, self.waited = set(late), [], []

    def copy_async(self, tensor: torch.Tensor) -> int:
        self.copies.append(tensor.clone())
        return len(self.copies) - 1

    def ready(self, handle: int) -> bool:
        return handle not in self.late

    def wait(self, handle: int) -> None:
        self.waited.append(handle)

    def value(self, handle: int, read):
        return read(self.copies[handle])


def deferring(fake: FakeDevice, everything: bool = True) -> Changes:
    """Changes with Tensor.item/.tolist patched to read through `fake`; `everything`: CPU tensors count as device
    tensors (else the default test, `is_cuda`)."""
    changes = Changes()
    extra = {"on_device": lambda tensor: True} if everything else {}
    defer_reads(changes, StaleReads(changes.counts, fake.copy_async, fake.ready, fake.wait, fake.value, **extra))
    return changes


def value_of(tensor: torch.Tensor) -> float:
    return tensor.item()  # one line, reached from several callers


def unpatched() -> bool:
    return all(getattr(torch.Tensor, name) is original for name, original in ORIGINALS.items()) and \
        "item" not in torch.Tensor.__dict__ and "tolist" not in torch.Tensor.__dict__


def test_the_first_call_at_a_site_is_real_and_each_later_one_returns_the_previous_value() -> None:
    fake = FakeDevice()
    changes = deferring(fake)
    try:
        seen = [torch.tensor(float(step)).item() for step in range(4)]
    finally:
        changes.restore()
    assert seen == [0.0, 0.0, 1.0, 2.0]
    assert [copy.item() for copy in fake.copies] == [0.0, 1.0, 2.0, 3.0]  # every call started its own copy
    assert changes.counts == {"first reads": 1, "stale reads": 3}
    assert unpatched()


def test_sites_are_independent() -> None:
    # the doctor's CUDA instrumentation wraps the patched method (two frames in hooks.py): the site is past them
    hooks = {"__name__": "gpufeed.doctor.observe.hooks"}
    exec("def timed(tensor):\n    return tensor.item()\ndef wait(tensor):\n    return timed(tensor)", hooks)
    fake = FakeDevice()
    changes = deferring(fake)
    try:
        lines, same_line, helper, through_hooks = [], [], [], []
        for step in range(3):
            first = torch.tensor(step).item()
            second = torch.tensor(100 + step).item()
            lines.append((first, second))
            same_line.append((torch.tensor(step).item(), torch.tensor(100 + step).item()))  # two offsets
            helper.append((value_of(torch.tensor(step)), value_of(torch.tensor(100 + step))))  # two callers
            through_hooks.append((hooks["wait"](torch.tensor(step)), hooks["wait"](torch.tensor(100 + step))))
    finally:
        changes.restore()
    # one site for all would give (0, 0), (100, 1), (101, 2) on each line
    assert lines == same_line == helper == through_hooks == [(0, 100), (0, 100), (1, 101)]
    assert changes.counts == {"first reads": 8, "stale reads": 16}


def test_an_old_copy_that_has_not_landed_is_waited_for() -> None:
    fake = FakeDevice(late=(0, 2))
    changes = deferring(fake)
    try:
        seen = [torch.tensor(float(step)).item() for step in range(4)]
    finally:
        changes.restore()
    assert seen == [0.0, 0.0, 1.0, 2.0]
    assert fake.waited == [0, 2]  # the second call waits for copy 0, the fourth for copy 2: never the newest
    assert changes.counts == {"first reads": 1, "stale reads": 3, "waits": 2}


def test_cpu_tensors_are_read_by_the_original_methods() -> None:
    fake = FakeDevice()
    changes = deferring(fake, everything=False)
    try:
        items = [torch.tensor(step + 0.5).item() for step in range(3)]
        lists = [torch.tensor([step, 2 * step]).tolist() for step in range(3)]
    finally:
        changes.restore()
    assert items == [0.5, 1.5, 2.5] and lists == [[0, 0], [1, 2], [2, 4]]
    assert fake.copies == [] and changes.counts == {}


def test_what_cannot_be_deferred_goes_to_the_original_method() -> None:
    fake = FakeDevice()
    changes = deferring(fake)
    try:
        with pytest.raises(RuntimeError, match="a Tensor with 2 elements cannot be converted to Scalar"):
            torch.tensor([1.0, 2.0]).item()
        large = [torch.full((MOST_LISTED + 1,), step).tolist()[0] for step in range(2)]
        shapes = [torch.arange(length).tolist() for length in (3, 3, 2)]  # the last batch is smaller: real
        formatted = [f"{torch.tensor(step + 0.25):.2f}" for step in range(3)]  # Tensor.__format__: the caller's site
        from_torch = {"__name__": "torch.fake", "torch": torch}
        exec("results = [torch.tensor(step).item() for step in range(3)]", from_torch)  # torch's own reads: exact
    finally:
        changes.restore()
    assert large == [0, 1] and shapes == [[0, 1, 2], [0, 1, 2], [0, 1]]
    assert formatted == ["0.25", "0.25", "1.25"] and from_torch["results"] == [0, 1, 2]
    assert changes.counts == {"first reads": 3, "stale reads": 3}  # 2 lists of 3 (1 stale), then 1 of 2; 3 formats
    assert len(fake.copies) == 6 and unpatched()


def test_the_methods_are_restored_when_the_run_raises() -> None:
    installed = []

    def install(changes: Changes) -> None:
        ASYNC_ITEM.install(changes)
        installed.append(torch.Tensor.item is not ORIGINALS["item"] and torch.Tensor.tolist is not
                         ORIGINALS["tolist"])

    experiment = dataclasses.replace(ASYNC_ITEM, install=install)
    run = run_once(Script(str(SCRIPTS / "crashes.py")), WatchSettings(5, 1, timeout_s=20), experiment)
    assert installed == [True] and run.problem is not None and "ValueError: loss became NaN" in run.problem
    assert unpatched() and torch.tensor(3.0).item() == 3.0


def test_on_the_cpu_no_read_is_deferred_and_that_is_no_gain() -> None:
    trial = run_trial(ASYNC_ITEM, Script(str(SCRIPTS / "tiny_linear.py")), WatchSettings(3, 1), repeats=1)
    assert trial.gain is None and trial.problem.startswith("no .item() or .tolist() of a CUDA tensor was deferred")
    assert unpatched()


# --- on a GPU ---------------------------------------------------------------------------------------------------


@on_gpu
def test_cuda_copies_return_the_previous_value_without_synchronizing() -> None:
    copies = CudaCopies()
    changes = Changes()
    defer_reads(changes, StaleReads(changes.counts, copies.copy_async, copies.ready, copies.wait, copies.value))
    try:
        seen = []
        for step in range(4):
            value = torch.full((), float(step), device="cuda") * 2
            if step == 1:  # from the second read on, a read must not wait for the device
                torch.cuda.set_sync_debug_mode("error")
            seen.append((value.item(), torch.full((3,), step, device="cuda").tolist()))
    finally:
        torch.cuda.set_sync_debug_mode(0)
        changes.restore()
    assert seen == [(0.0, [0] * 3), (0.0, [0] * 3), (2.0, [1] * 3), (4.0, [2] * 3)]
    assert changes.counts["stale reads"] == 6 and unpatched()


@on_gpu
@pytest.mark.slow
@pytest.mark.timing
def test_deferring_the_per_step_item_speeds_up_the_gpu_sync_script(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "report.json"
    status = main(["doctor", "--steps", "20", "--warmup", "5", "--timeout", "60", "--try", "--repeats", "2",
                   "--json", str(target), str(SCRIPTS / "gpu_item_sync.py")])
    capsys.readouterr()
    document = json.loads(target.read_text())
    sync = [finding for finding in document["findings"] if finding["kind"] == "sync_stall"]
    assert status == 0 and len(sync) == 1, document["unmeasured"]
    gain = sync[0]["gain"]
    # gpu_item_sync.py's GPU waits for the host to launch 40 narrow layers each step; without the wait the host
    # launches them while the GPU runs the previous step's head, so the step should be faster, not just as fast.
    assert gain is not None and gain["measured"] > 1.0, document["unmeasured"]
    assert gain["how"].startswith("each CUDA .item()") and "one step stale" in gain["how"]
    assert not any(line.startswith("verified fix for sync_stall") for line in document["unmeasured"])
