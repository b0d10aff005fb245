"""Atomic file writes: a temporary file in the destination's folder, fsynced, then renamed.

A process killed at any point leaves either the old file or the new one at the destination, never
half of one. Temporary names carry the writer's process id so that a later writer can recognise and
remove the leftovers of a killed one (`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TEMP_MARKER = ".partial-"


def temporary_path(destination: Path) -> Path:
    """`dir/.name.partial-PID` beside `destination`."""
    return destination.with_name(f".{destination.name}{TEMP_MARKER}{os.getpid()}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(destination: Path) -> list[Path]:
    """Delete temporaries for `destination` whose writer process is gone; return what was removed."""
    removed = []
    prefix = f".{destination.name}{TEMP_MARKER}"
    folder = destination.parent if str(destination.parent) else Path(".")
    if not folder.is_dir():
        return removed
    for candidate in folder.iterdir():
        if not candidate.name.startswith(prefix):
            continue
        pid_text = candidate.name[len(prefix):]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)) and int(pid_text) != os.getpid():
            with contextlib.suppress(OSError):
                candidate.unlink()
                removed.append(candidate)
    return removed


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def finish_temporary(handle: BinaryIO, temporary: Path, destination: Path) -> None:
    """Flush, fsync and close `handle` (open on `temporary`), rename it onto `destination`, fsync the folder.

    The one ending of every atomic write here: `atomic_open` and writers that stream a large file through
    their own temporary (`data.writer.PackWriter`) both finish with it.
    """
    handle.flush()
    os.fsync(handle.fileno())
    handle.close()
    os.replace(temporary, destination)
    _fsync_folder(destination.parent)


@contextlib.contextmanager
def atomic_open(destination: str | os.PathLike, mode: str = "wb") -> Iterator[BinaryIO]:
    """Open a temporary file for writing; on clean exit fsync and rename it onto `destination`.

    On an exception the temporary file is removed and the destination is untouched.
    """
    destination = Path(destination)
    temporary = temporary_path(destination)
    handle = open(temporary, mode)  # noqa: SIM115 - closed below on every path
    try:
        yield handle
        finish_temporary(handle, temporary, destination)
    except BaseException:
        handle.close()
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def write_bytes_atomic(destination: str | os.PathLike, data: bytes) -> None:
    with atomic_open(destination, "wb") as handle:
        handle.write(data)


def write_text_atomic(destination: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(destination, text.encode("utf-8"))
