"""kineto (torch.profiler's tracer) in torch 2.13 prints "USDT: ... profiler_start" and "profiler_stop" lines on
standard error at each start and stop. `without_kineto_noise` holds file descriptor 2 in a temporary file around
a profiler call and writes back every other line, so nothing else is lost."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def without_kineto_noise():
    """Run the body with standard error (fd 2) captured; write back all but kineto's USDT lines."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (an embedded interpreter): leave it alone
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(keepends=True) if not line.startswith(b"USDT:")]
            if kept:
                os.write(2, b"".join(kept))
