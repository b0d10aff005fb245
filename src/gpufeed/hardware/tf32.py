"""TF32 switching for a measurement: `tf32_switched` turns TF32 on (tf32) or off (fp32) for cuBLAS matmuls and
cuDNN convolutions and restores both switches after, whether they were set through the legacy `allow_tf32` or the
newer `fp32_precision`; `tf32_flags` does it on CUDA only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


def _tf32_switches() -> tuple[tuple[Any, Any], ...]:
    """(holder of the legacy `allow_tf32`, holder of the newer `fp32_precision`) for cuBLAS matmul and cuDNN conv."""
    backends = torch.backends
    return (backends.cuda.matmul, backends.cuda.matmul), (backends.cudnn, backends.cudnn.conv)


def _tf32_is_on(legacy: Any, new: Any) -> bool:
    try:
        return bool(legacy.allow_tf32)
    except RuntimeError:  # set through fp32_precision, and torch refuses to read it through the legacy flag
        precision = new.fp32_precision
        return precision == "tf32" or (precision == "none" and torch.backends.fp32_precision == "tf32")


def _tf32_restorer(legacy: Any, new: Any) -> Callable[[], None]:
    """A function that puts one switch back as it is now, through the API it was set with."""
    try:
        saved = bool(legacy.allow_tf32)
        return lambda: setattr(legacy, "allow_tf32", saved)
    except RuntimeError:
        saved_precision = new.fp32_precision
        return lambda: setattr(new, "fp32_precision", saved_precision)


@contextmanager
def tf32_switched(precision: str) -> Iterator[tuple[bool, bool]]:
    """TF32 on for "tf32", off for "fp32", untouched otherwise; yields (matmul, cudnn) as they are inside and
    restores both after, whether they were set with `allow_tf32` or with the newer `fp32_precision`."""
    switches = _tf32_switches()
    restorers = [_tf32_restorer(legacy, new) for legacy, new in switches]
    try:
        if precision in ("tf32", "fp32"):
            for legacy, _ in switches:
                legacy.allow_tf32 = precision == "tf32"
        matmul, cudnn = (_tf32_is_on(legacy, new) for legacy, new in switches)
        yield matmul, cudnn
    finally:
        for restore in restorers:
            restore()


@contextmanager
def tf32_flags(device: torch.device, precision: str) -> Iterator[tuple[bool | None, bool | None]]:
    """`tf32_switched(precision)` on CUDA; off CUDA yields (None, None) and touches nothing."""
    if device.type != "cuda":
        yield None, None
        return
    with tf32_switched(precision) as flags:
        yield flags
