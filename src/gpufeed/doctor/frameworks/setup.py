"""Which training framework runs the script, and where and with what settings its training loader is set up.

Detection, from what the hooks see while the script runs (never from the script's text):
- every torch DataLoader built while the doctor watches is recorded (`Constructions`; observe/hooks.py installs it with
  the loader patches): the user's line that built it (`patching.user_frame`: the first frame outside torch,
  gpufeed and the frameworks, past the loader's own constructors), its settings as set, and the framework:
  - built inside transformers' Trainer (a frame of transformers.trainer whose `self` is a Trainer, between the
    constructor and the user's line): the settings are its TrainingArguments' (dataloader_num_workers, ...), the
    line is where that TrainingArguments was made (its `__post_init__` is patched once transformers.training_args
    is imported: at once, or by an import hook), else the user's call into the Trainer (`trainer.train()`);
  - built by a library from another recorded loader found in the library frames' locals (accelerate's `prepare`
    wraps a new DataLoader built from the user's; Lightning re-instantiates one): that loader's line and settings;
  - else the user's DataLoader(...) line, and the framework whose frames are on the stack (Lightning calling
    `train_dataloader()`, say).
  With the line, the Dataset the loader wraps: whether it is map-style (`__len__` and `__getitem__`, not an
  IterableDataset) and the user's name for it there (`dataset_variable`: a local of that line's frame, or
  `self.NAME`, holding that very object; None when it is built inline). When its batches are also (images, labels)
  (`setup_of`'s `image_batches`), the Setup is `packable`: what `gpufeed.pack(dataset, ...)` takes.
- when the batches are read (`setup_of`): a user's loader read by Lightning's loop (passed to `fit`) is Lightning's.
- `imported`: the frameworks in sys.modules at the end; one imported but not tied to the training loop is a note,
  and the advice stays in plain PyTorch's words. A site that cannot be found is a note too (`explain`).

The fixes in the framework's words are words.py's. This module loads no torch until the hooks install
`Constructions`.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import weakref
from dataclasses import dataclass, replace
from typing import Any

NAMES = {"torch": "plain PyTorch", "transformers": "the Hugging Face Trainer", "lightning": "PyTorch Lightning",
         "accelerate": "Hugging Face accelerate"}
FRAMEWORKS = tuple(NAMES)
_PRECEDENCE = ("transformers", "lightning", "accelerate")  # when several are on the stack (the Trainer uses accelerate)
TRAINING_ARGUMENTS = "transformers.training_args"
# the loader's settings in TrainingArguments' names; a DataLoader's are the generic names themselves
TRAINING_ARGUMENTS_KNOBS = {"num_workers": "dataloader_num_workers", "pin_memory": "dataloader_pin_memory",
                            "persistent_workers": "dataloader_persistent_workers",
                            "prefetch_factor": "dataloader_prefetch_factor",
                            "batch_size": "per_device_train_batch_size"}


@dataclass(frozen=True)
class LoaderKnobs:
    """A loader's settings as the user set them: the values in effect where they are given, after the framework's
    own adjustments (TrainingArguments turns dataloader_pin_memory off with use_cpu=True, say); None: not read."""

    num_workers: int | None
    pin_memory: bool | None
    persistent_workers: bool | None
    prefetch_factor: int | None
    batch_size: int | None


@dataclass(frozen=True)
class LoaderOrigin:
    """One DataLoader's construction, as recorded: the user's line (absolute file), what is there, where its
    settings are given ("DataLoader" or "TrainingArguments"), the framework, its settings, and how it was told."""

    file: str | None
    line: int | None
    site_is: str  # "DataLoader(...)", "TrainingArguments(...)", "Trainer.train()"
    settings_in: str
    framework: str
    knobs: LoaderKnobs | None
    how: str
    note: str | None = None  # why the site is not the settings' own line
    map_dataset: bool = False  # the loader wraps a map-style Dataset (not for the Trainer's, whose items are dicts)
    dataset_variable: str | None = None  # the user's name for it at the line: "train_set", "self.train_set"
    trainer: str | None = None  # the Trainer's class with its package, when the Trainer built it: "trl.SFTTrainer"


@dataclass(frozen=True)
class Setup:
    """The training loop's framework and its loader's origin, for the fixes (the Observation's `setup`). The
    defaults: a plain PyTorch loop whose loader's site is not known."""

    framework: str = "torch"  # one of FRAMEWORKS
    site: str | None = None  # "train.py:42", relative to the working directory when inside it
    site_is: str | None = None
    settings_in: str = "DataLoader"
    knobs: LoaderKnobs | None = None
    imported: tuple[str, ...] = ()  # frameworks in sys.modules at the end of the run
    how: str | None = None
    note: str | None = None
    packable: bool = False  # a map-style Dataset (LoaderOrigin's) whose batches are (images, labels): gpufeed.pack's
    dataset_variable: str | None = None  # the user's name for that Dataset (LoaderOrigin's)
    trainer: str | None = None  # LoaderOrigin's: "transformers.Trainer", "trl.SFTTrainer"


PLAIN = Setup()  # a plain PyTorch loop, its loader's site not known: the fixes' default


def _framework_of_module(name: str) -> str | None:
    if name.startswith("transformers.trainer"):
        return "transformers"
    if name.startswith(("pytorch_lightning", "lightning.pytorch")):
        return "lightning"
    return "accelerate" if name.partition(".")[0] == "accelerate" else None


def _module(frame) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _is_trainer(value: Any) -> bool:
    return any(cls.__name__ == "Trainer" and cls.__module__ == "transformers.trainer" for cls in type(value).__mro__)


def _knobs_of(value: Any, names: dict[str, str]) -> LoaderKnobs:
    return LoaderKnobs(**{name: getattr(value, names.get(name, name), None) for name in LoaderKnobs.__annotations__})


class Constructions:
    """Records every DataLoader built (and every TrainingArguments made) while installed; `origin(loader)` says
    where a loader came from. `problems`: what went wrong while recording (the caller's notes)."""

    def __init__(self) -> None:
        self._loaders: dict[int, tuple[weakref.ref, LoaderOrigin]] = {}
        self._arguments: dict[int, tuple[weakref.ref, tuple[str, int]]] = {}
        self._patches: list = []
        self._finder = None  # patching.AfterImport, until TrainingArguments is imported
        self.problems: list[str] = []

    def install(self, patches: list) -> None:
        """Patch `DataLoader.__init__` and TrainingArguments (now, or when it is imported) into `patches`, the
        instrumentation's list, which restores them; `remove()` takes the import hook out."""
        from torch.utils.data import DataLoader

        from gpufeed.doctor.patching import Patch, when_imported

        self._patches = patches
        patches.append(Patch(DataLoader, "__init__", functools.partial(self._wrap, self.loader_built)))
        self._finder = when_imported(TRAINING_ARGUMENTS, self._patch_arguments)

    def remove(self) -> None:
        from gpufeed.doctor.patching import forget

        forget(self._finder)
        self._finder = None

    def origin(self, loader: Any) -> LoaderOrigin | None:
        ref, found = self._loaders.get(id(loader), (None, None))
        return found if ref is not None and ref() is loader else None

    def _wrap(self, record, original):
        @functools.wraps(original)  # Lightning inspects the signature of what it wraps
        def wrapper(built, *args, **kwargs):
            result = original(built, *args, **kwargs)
            try:
                record(built, sys._getframe(1))
            except Exception as error:  # never the user's script's problem
                self.problems.append(f"{type(built).__name__} not recorded ({type(error).__name__}: {error})")
            return result
        return wrapper

    def _patch_arguments(self, module) -> None:
        from gpufeed.doctor.patching import Patch

        arguments = getattr(module, "TrainingArguments", None)
        if arguments is None or "__post_init__" not in arguments.__dict__:
            self.problems.append("TrainingArguments: this transformers has no TrainingArguments.__post_init__ to "
                                 "patch, so where it is made is not known")
            return
        try:  # inside the script's import of transformers (the import hook): never its problem
            self._patches.append(Patch(arguments, "__post_init__",
                                       functools.partial(self._wrap, self.arguments_made)))
        except Exception as error:
            self.problems.append(f"TrainingArguments: not patched ({type(error).__name__}: {error})")

    def _remember(self, table: dict, value: Any, record: Any) -> None:
        key = id(value)
        table[key] = (weakref.ref(value, lambda _: table.pop(key, None)), record)

    def arguments_made(self, arguments: Any, frame) -> None:
        from gpufeed.doctor.patching import user_frame

        user, _ = user_frame(frame, arguments)
        if user is not None:
            self._remember(self._arguments, arguments, (user.f_code.co_filename, user.f_lineno))

    def loader_built(self, loader: Any, frame) -> None:
        """Record where `loader` came from, `frame` being its constructor's caller (the module docstring's rules,
        in order: rebuilt from a recorded loader, built by the Trainer, built by the user)."""
        from gpufeed.doctor.patching import constructing, user_frame

        user, callee = user_frame(frame, loader)
        between = list(itertools.takewhile(lambda walk: walk is not user, _stack(frame)))  # the libraries' frames
        on_stack = {_framework_of_module(_module(walk)) for walk in _stack(frame)}
        stacked = next((name for name in _PRECEDENCE if name in on_stack), "torch")
        origin = self._rebuilt(between, loader, stacked)
        if origin is None:
            file, line = (user.f_code.co_filename, user.f_lineno) if user is not None else (None, None)
            called = f"{getattr(callee.f_code, 'co_qualname', callee.f_code.co_name)}()" if callee else ""
            trainer = next((walk.f_locals.get("self") for walk in between if _module(walk).startswith(
                "transformers.trainer") and _is_trainer(walk.f_locals.get("self"))), None)
            if trainer is not None:
                origin = self._trainer_origin(trainer, file, line, called)
            else:
                own = callee is None or constructing(callee, loader)
                how = ("the training DataLoader was built in the script" if stacked == "torch" else
                       f"the training DataLoader was built while {NAMES[stacked]} ran")
                origin = LoaderOrigin(file, line, f"{type(loader).__name__}(...)" if own else called, "DataLoader",
                                      stacked, _knobs_of(loader, {}), how, None,
                                      *_dataset_seen(getattr(loader, "dataset", None), user))
        self._remember(self._loaders, loader, origin)

    def _rebuilt(self, between: list, loader: Any, stacked: str) -> LoaderOrigin | None:
        """The origin of a recorded loader (not `loader`) among the library frames' locals, as `loader`'s: a loader
        a library builds from the user's; the framework is the stack's when the user's loader was plain torch."""
        from gpufeed.doctor.patching import in_framework

        for walk in between:
            if in_framework(walk):
                for value in list(walk.f_locals.values()):
                    parent = self.origin(value) if value is not loader else None
                    if parent is not None:
                        return replace(parent, framework=stacked if parent.framework == "torch" else parent.framework,
                                       how=f"{parent.how}; rebuilt by {_module(walk)}")
        return None

    def _trainer_origin(self, trainer: Any, file: str | None, line: int | None, called: str) -> LoaderOrigin:
        """A loader built by transformers' Trainer: its TrainingArguments' settings, at the line that made them
        (else the call into the Trainer, with a note)."""
        knobs = _knobs_of(trainer.args, TRAINING_ARGUMENTS_KNOBS)
        kind, arguments = type(trainer), type(trainer.args).__name__
        named = f"{kind.__module__.partition('.')[0]}.{kind.__name__}"
        how = (f"the training DataLoader was built by transformers' Trainer from its {arguments}" if named ==
               "transformers.Trainer" else f"the training DataLoader was built by {named} (a transformers Trainer) "
                                           f"from its {arguments}")
        ref, made = self._arguments.get(id(trainer.args), (None, None))
        if ref is not None and ref() is trainer.args:
            return LoaderOrigin(*made, f"{arguments}(...)", "TrainingArguments", "transformers", knobs, how,
                                trainer=named)
        return LoaderOrigin(file, line, called, "TrainingArguments", "transformers", knobs, how,
                            f"the Trainer's {arguments} was made before the doctor's hooks were installed, so "
                            f"the site is the call into the Trainer ({called})", trainer=named)


def _dataset_seen(dataset: Any, user) -> tuple[bool, str | None]:
    """Whether `dataset` is map-style, and the name the user's frame gives it (a local, else an attribute of its
    `self`)."""
    from torch.utils.data import IterableDataset  # loaded: a DataLoader was just built

    kind = type(dataset)
    if dataset is None or isinstance(dataset, IterableDataset) or not (hasattr(kind, "__len__")
                                                                       and hasattr(kind, "__getitem__")):
        return False, None
    names = list(user.f_locals.items()) if user is not None else []
    owner = dict(names).get("self")
    attributes = [(f"self.{name}", value) for name, value in vars(owner).items()
                  if not name.startswith("_")] if hasattr(owner, "__dict__") else []
    names = [(name, value) for name, value in names if not name.startswith("_")] + attributes
    return True, next((name for name, value in names if value is dataset), None)


def _stack(frame):
    while frame is not None:
        yield frame
        frame = frame.f_back


def imported_frameworks(modules=None) -> tuple[str, ...]:
    """The frameworks whose training loops are imported: transformers' Trainer, Lightning, accelerate."""
    modules = sys.modules if modules is None else modules
    found = {"transformers": ("transformers.trainer",), "lightning": ("pytorch_lightning", "lightning.pytorch"),
             "accelerate": ("accelerate",)}
    return tuple(name for name, packages in found.items()
                 if any(modules.get(package) is not None for package in packages))  # None: an import blocked


def _lightning_package(filename: str) -> str | None:
    """The Lightning package (imported) that holds `filename`, if one does."""
    for name in ("pytorch_lightning", "lightning"):
        folder = os.path.dirname(getattr(sys.modules.get(name), "__file__", None) or "")
        if folder and filename.startswith(folder + os.sep):
            return name
    return None


def setup_of(origin: LoaderOrigin | None, batches_from: str | None, image_batches: bool = False) -> Setup:
    """The Setup of a run whose training batches came from a loader of `origin` (None: not recorded), asked for
    at `batches_from` (the file of the first frame outside torch and gpufeed; None: not known); `image_batches`:
    they were (images, labels) (observe/clock.py), so a map-style Dataset behind them is `packable`."""
    from gpufeed.doctor.patching import shown_path

    imported = imported_frameworks()
    if origin is None:
        return Setup(imported=imported)
    framework, how = origin.framework, origin.how
    reader = _lightning_package(batches_from) if framework == "torch" and batches_from is not None else None
    if reader is not None:
        framework, how = "lightning", f"{how}, and its batches are read by {reader}'s loop"
    site = f"{shown_path(origin.file)}:{origin.line}" if origin.file is not None else None
    return Setup(framework, site, origin.site_is, origin.settings_in, origin.knobs, imported, how, origin.note,
                 origin.map_dataset and image_batches, origin.dataset_variable, origin.trainer)
