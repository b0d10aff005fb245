"""Checkpoints: exact round trip, weights_only loading, pruning, torn files, a full disk, RNG."""

from __future__ import annotations

import errno
import io

import numpy as np
import pytest
import torch

from gpufeed.errors import ConfigError, RunFailed
from gpufeed.train.checkpoint import (
    CheckpointError,
    capture_rng,
    find_latest,
    load_checkpoint,
    restore_rng,
    save_checkpoint,
)


def make_state(step: int = 1) -> tuple[dict, torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(step)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):  # fills the momentum buffers
        optimizer.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()
        optimizer.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": None,
        "rng": capture_rng(),
        "feed": {"batches_done": 7, "drop_last": True},
        "step": step,
        "epoch": 0,
        "config": {"lr": 0.1, "model": "tiny", "crop": [32, 32], "seed": None, "flip": False},
        "format": 1,
    }
    return state, model, optimizer


def assert_same(expected, actual, where: str = "state") -> None:
    """Every tensor bit-equal (same dtype and shape), every other value equal, same structure."""
    assert type(expected) is type(actual) or (isinstance(expected, dict) and isinstance(actual, dict)), where
    if isinstance(expected, torch.Tensor):
        assert expected.dtype == actual.dtype and torch.equal(expected, actual), where
    elif isinstance(expected, dict):
        assert list(expected) == list(actual), where
        for key in expected:
            assert_same(expected[key], actual[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), where
        for index, (left, right) in enumerate(zip(expected, actual, strict=True)):
            assert_same(left, right, f"{where}[{index}]")
    else:
        assert expected == actual, where


def test_round_trip_is_bit_exact(tmp_path):
    state, model, optimizer = make_state(step=12)
    path = save_checkpoint(tmp_path, 12, state)
    assert path == tmp_path / "checkpoint-000000012.pt"
    loaded = load_checkpoint(path)
    assert_same(state, loaded)
    assert loaded["optimizer"]["state"][0]["momentum_buffer"].abs().sum() > 0  # momentum was really saved

    fresh, fresh_optimizer = make_state(step=99)[1:]
    fresh.load_state_dict(loaded["model"])
    fresh_optimizer.load_state_dict(loaded["optimizer"])
    for ours, theirs in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(ours, theirs)
        assert torch.equal(optimizer.state[ours]["momentum_buffer"], fresh_optimizer.state[theirs]["momentum_buffer"])


def test_load_uses_weights_only(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path, 1, make_state()[0])
    seen = {}
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    load_checkpoint(path)
    assert seen["weights_only"] is True and seen["map_location"] == "cpu"


class Payload:
    """A custom class: unpickling it would run arbitrary code, so weights_only refuses it."""

    def __init__(self):
        self.value = 3


def test_pickled_custom_class_is_refused(tmp_path):
    path = tmp_path / "checkpoint-000000005.pt"
    state = make_state()[0]
    state["config"] = Payload()  # otherwise a complete checkpoint: only weights_only can refuse it
    torch.save(state, path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    assert caught.value.path == path
    assert "Unpickl" in caught.value.reason
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.exit_status == 1


def test_foreign_file_is_refused(tmp_path):
    path = tmp_path / "checkpoint-000000005.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(CheckpointError, match="lacks model"):
        load_checkpoint(path)


def test_keep_prunes_older_checkpoints(tmp_path):
    state = make_state()[0]
    for step in (10, 20, 30, 40, 50):
        save_checkpoint(tmp_path, step, state, keep=3)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["checkpoint-000000030.pt", "checkpoint-000000040.pt", "checkpoint-000000050.pt"]


def test_the_checkpoint_just_written_is_never_pruned(tmp_path):
    state = make_state()[0]
    for step in (30, 40, 50):
        save_checkpoint(tmp_path, step, state, keep=3)
    written = save_checkpoint(tmp_path, 5, state, keep=3)  # an older step, e.g. after resuming from an earlier one
    # the newest written are kept, not the highest steps: 30 goes, and 5 stays beside 40 and 50
    names = sorted(path.name for path in tmp_path.iterdir())
    assert written.exists() and names == ["checkpoint-000000005.pt", "checkpoint-000000040.pt",
                                          "checkpoint-000000050.pt"]


def test_truncated_and_random_checkpoints_are_skipped(tmp_path):
    state = make_state()[0]
    good = save_checkpoint(tmp_path, 100, state)
    torn = save_checkpoint(tmp_path, 200, state)
    data = torn.read_bytes()
    torn.write_bytes(data[: len(data) // 2])
    noise = tmp_path / "checkpoint-000000300.pt"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())

    loaded, path, skipped = find_latest(tmp_path)
    assert path == good
    assert_same(state, loaded)
    assert [skipped_path for skipped_path, _ in skipped] == [noise, torn]
    assert all(reason for _, reason in skipped)


def test_leftovers_of_a_killed_save_are_removed(tmp_path):
    leftover = tmp_path / ".checkpoint-000000007.pt.partial-999999999"  # no such process
    leftover.write_bytes(b"half a checkpoint")
    written = save_checkpoint(tmp_path, 8, make_state()[0])
    assert sorted(tmp_path.iterdir()) == [written]


def test_find_latest_without_checkpoints(tmp_path):
    assert find_latest(tmp_path) == (None, None, [])
    assert find_latest(tmp_path / "missing") == (None, None, [])


def fail_after_some_bytes(state, handle):
    handle.write(b"PK\x03\x04 partial checkpoint bytes")
    raise OSError(errno.ENOSPC, "No space left on device")


class FullDisk(io.RawIOBase):
    """Forwards writes to the real handle until 1000 bytes have gone, then reports a full disk."""

    def __init__(self, handle):
        self.handle = handle
        self.written = 0

    def writable(self):
        return True

    def write(self, data):
        self.written += len(data)
        if self.written > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.handle.write(data)


@pytest.mark.parametrize("how", ["torch_save_raises", "torch_save_write_fails"])
def test_full_disk_keeps_the_previous_checkpoint(tmp_path, monkeypatch, how):
    state = make_state()[0]
    previous = save_checkpoint(tmp_path, 10, state)
    real_save = torch.save
    if how == "torch_save_raises":
        monkeypatch.setattr(torch, "save", fail_after_some_bytes)
    else:  # torch itself meets the failing write and reports it as a chained RuntimeError
        monkeypatch.setattr(torch, "save", lambda obj, handle: real_save(obj, FullDisk(handle)))

    with pytest.raises(RunFailed) as caught:
        save_checkpoint(tmp_path, 20, state)
    message = str(caught.value)
    assert "\n" not in message
    assert f"could not write checkpoint {tmp_path / 'checkpoint-000000020.pt'}: No space left on device" in message
    assert f"the previous checkpoint {previous} is intact" in message
    assert "free disk space or point --out elsewhere" in message
    assert sorted(tmp_path.iterdir()) == [previous]  # no temporary, no new file
    monkeypatch.setattr(torch, "save", real_save)
    assert_same(state, load_checkpoint(previous))


def test_full_disk_with_no_previous_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setattr(torch, "save", fail_after_some_bytes)
    with pytest.raises(RunFailed, match="the previous checkpoint none is intact"):
        save_checkpoint(tmp_path, 1, make_state()[0])
    assert list(tmp_path.iterdir()) == []


def test_numpy_value_is_refused_before_writing(tmp_path):
    state = make_state()[0]
    state["config"]["mean"] = np.array([0.5, 0.5, 0.5])
    with pytest.raises(ConfigError, match=r"state\['config'\]\['mean'\] is a numpy.ndarray"):
        save_checkpoint(tmp_path, 1, state)
    assert list(tmp_path.iterdir()) == []


def test_custom_object_in_a_list_is_refused(tmp_path):
    state = make_state()[0]
    state["config"]["crop"] = [32, Payload()]
    with pytest.raises(ConfigError, match=r"state\['config'\]\['crop'\]\[1\]"):
        save_checkpoint(tmp_path, 1, state)


def test_rng_capture_and_restore_reproduce_draws():
    torch.manual_seed(1234)
    torch.rand(3)
    saved = capture_rng()
    expected = torch.rand(5)
    torch.rand(100)
    restore_rng(saved)
    assert torch.equal(torch.rand(5), expected)
    assert saved["cuda"] == [] or len(saved["cuda"]) == torch.cuda.device_count()


def test_rng_survives_a_checkpoint(tmp_path):
    state = make_state()[0]
    state["rng"] = capture_rng()
    expected = torch.rand(4)
    path = save_checkpoint(tmp_path, 3, state)
    torch.rand(50)
    restore_rng(load_checkpoint(path)["rng"])
    assert torch.equal(torch.rand(4), expected)
