"""Small tools the doctor's instrumentation and experiments share: a reversible patch of one attribute, a patch
made once a module is imported, the first tensor of a nested batch, and the line of user code that called into a
library (or built an object)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import torch

_MISSING = object()
_LIBRARIES = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
# the training frameworks whose frames `user_frame` passes (by the top package of the frame's module, so that a
# dataclass's generated __init__, whose file is "<string>", counts as its class's module)
FRAMEWORK_PACKAGES = frozenset({"transformers", "accelerate", "pytorch_lightning", "lightning", "lightning_fabric",
                                "lightning_utilities"})


def call_site() -> tuple[str, int] | None:
    """(file, line) of the code that called into the loader: the first frame outside torch and gpufeed (a
    training loop's `for`, an evaluation's `for`, a `next(batches)`); library loops (accelerate, Lightning) keep
    their own lines, so their training and validation loops stay apart."""
    frame, _ = user_frame(sys._getframe(1), frameworks=False)
    return (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None


def in_framework(frame) -> bool:
    """The frame runs code of one of FRAMEWORK_PACKAGES."""
    return str(frame.f_globals.get("__name__", "")).partition(".")[0] in FRAMEWORK_PACKAGES


def constructing(frame, built: object) -> bool:
    """The frame is a method of `built` (its first argument): its __init__, a subclass's, a wrapper's."""
    code = frame.f_code
    return code.co_argcount > 0 and frame.f_locals.get(code.co_varnames[0]) is built


def user_frame(frame, built: object = None, frameworks: bool = True):
    """(the user's frame, the frame it called) from `frame` outwards: the first frame outside torch, gpufeed and
    (with `frameworks`) the training frameworks (FRAMEWORK_PACKAGES), and not a method of `built` (an object under
    construction: its own __init__, a subclass's or a library's wrapper of it), so that it is the line that built
    `built` or called the library that did (`trainer.train()`). Nones when every frame is a library's."""
    callee = None
    while frame is not None and (frame.f_code.co_filename.startswith(_LIBRARIES)
                                 or (frameworks and in_framework(frame))
                                 or (built is not None and constructing(frame, built))):
        frame, callee = frame.f_back, frame
    return frame, callee


INSTALLED = ("site-packages", "dist-packages")  # the folders installed packages live in


def library_file(filename: str) -> bool:
    """The file is torch's, gpufeed's or an installed package's (not the user's code)."""
    return filename.startswith(_LIBRARIES) or any(part in INSTALLED
                                                  for part in filename.replace(os.sep, "/").split("/"))


def shown_path(filename: str) -> str:
    """A file's name as the user would type it: an installed package's from the package
    (`torch/utils/data/_utils/collate.py`, wherever the environment is), else relative to the working directory
    when inside it."""
    parts = filename.replace(os.sep, "/").split("/")
    installed = [index for index, part in enumerate(parts) if part in INSTALLED]
    if installed and installed[-1] + 1 < len(parts):
        return "/".join(parts[installed[-1] + 1:])
    relative = os.path.relpath(filename)
    return filename if relative.startswith("..") else relative


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


class AfterImport:
    """A sys.meta_path finder that calls `then(module)` once the module `name` has run, and gives the module its
    own loader back, so that nothing of it stays on the module."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _ThenLoader(spec.loader, self.then)
                return spec
        return None


def when_imported(name: str, then) -> AfterImport | None:
    """`then(module)` now when the module `name` is imported, else once it is: the AfterImport finder put first on
    sys.meta_path (take it out with `forget`), or None when it ran now."""
    if name in sys.modules:
        then(sys.modules[name])
        return None
    finder = AfterImport(name, then)
    sys.meta_path.insert(0, finder)
    return finder


def forget(finder: AfterImport | None) -> None:
    """Take a `when_imported` finder off sys.meta_path (None, or one already gone: nothing to do)."""
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


class _ThenLoader:
    def __init__(self, loader, then) -> None:
        self.loader, self.then = loader, then

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.then(module)


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
