"""Small tools the doctor's instrumentation and experiments share: a reversible patch of one attribute, the
first tensor of a nested batch, and the line of user code that called into a library."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import torch

_MISSING = object()
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)


def call_site() -> tuple[str, int] | None:
    """(file, line) of the code that called into the loader: the first frame outside torch and gpufeed (a
    training loop's `for`, an evaluation's `for`, a `next(batches)`); library loops (accelerate, Lightning) keep
    their own lines, so their training and validation loops stay apart."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame = frame.f_back
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


class Patch:
    """`owner.name` replaced by `make(original)`; `restore()` puts back exactly what was there (or nothing)."""

    def __init__(self, owner: Any, name: str, make):
        self.owner, self.name = owner, name
        self.saved = owner.__dict__.get(name, _MISSING)
        setattr(owner, name, make(getattr(owner, name)))

    def restore(self) -> None:
        if self.saved is _MISSING:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.saved)


def first_tensor(value: Any, requires_grad: bool = False) -> torch.Tensor | None:
    """The first tensor in a (nested) tuple, list or mapping (a dict, or a UserDict such as Hugging Face's
    BatchEncoding), depth first; with `requires_grad`, the first that requires grad."""
    if isinstance(value, torch.Tensor):
        return value if value.requires_grad or not requires_grad else None
    items = value.values() if isinstance(value, Mapping) else value if isinstance(value, (list, tuple)) else ()
    for item in items:
        found = first_tensor(item, requires_grad)
        if found is not None:
            return found
    return None
