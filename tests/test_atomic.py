"""The one atomic write: every writer ends with `finish_temporary` (fsync the file, rename, fsync the folder)."""

import os

import pytest
import torch

from gpufeed import atomic
from gpufeed.atomic import atomic_open, finish_temporary, temporary_path, write_text_atomic
from gpufeed.train.outputs import RunFiles


@pytest.fixture
def synced(monkeypatch):
    """Records what was fsynced, in order: ("file", descriptor) and ("folder", path)."""
    calls = []
    real_fsync = os.fsync

    def fsync(descriptor):
        calls.append(("file", descriptor))
        real_fsync(descriptor)

    monkeypatch.setattr(atomic.os, "fsync", fsync)
    monkeypatch.setattr(atomic, "_fsync_folder", lambda folder: calls.append(("folder", folder)))
    return calls


def test_finish_temporary_syncs_the_file_renames_then_syncs_the_folder(tmp_path, synced):
    destination = tmp_path / "out.bin"
    temporary = temporary_path(destination)
    handle = open(temporary, "wb")
    handle.write(b"payload")
    finish_temporary(handle, temporary, destination)
    assert handle.closed and destination.read_bytes() == b"payload" and not temporary.exists()
    assert [kind for kind, _ in synced] == ["file", "folder"] and synced[1][1] == tmp_path


def test_atomic_open_finishes_through_it_and_leaves_nothing_on_an_error(tmp_path, synced):
    destination = tmp_path / "note.txt"
    write_text_atomic(destination, "one")
    assert destination.read_text() == "one" and [kind for kind, _ in synced] == ["file", "folder"]
    with pytest.raises(RuntimeError), atomic_open(destination) as handle:
        handle.write(b"half")
        raise RuntimeError("killed")
    assert destination.read_text() == "one" and list(tmp_path.iterdir()) == [destination]


def test_the_saved_model_is_fsynced_with_its_folder(tmp_path, synced):
    files = RunFiles(tmp_path / "run")
    saved = files.save_model(torch.nn.Linear(2, 3))
    assert saved.name == "model.safetensors" and saved.stat().st_size > 0
    assert ("folder", saved.parent) in synced  # the rename itself is on disk, not only the bytes
    assert not any(".partial-" in path.name for path in saved.parent.iterdir())
