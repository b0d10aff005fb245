"""A folder of images given as --data or --val: packed into the cache on first use (data/pack/cache.py), reused
while its files stay the same, and read like any packed file.

The pack: JPEG at the pack's default quality, longer side at most --max-side, by default
ceil(image_size / 0.875) (256 for --image-size 224: the centre crop's cover). A folder needs --image-size,
because photos vary in size and train needs a size for its crops; one line says so when it is missing.

Every process (each rank of a torchrun job) asks the cache itself: whoever takes the folder's lock first packs it,
the others wait and read the same file. Only rank 0 reports (the events go through `notify`). A signal while
packing or waiting stops at once (KeyboardInterrupt: exit 130), the pack left unwritten.

Exact resume: the run stores the folder's path (its config) and the folder's cache key (each checkpoint's
`folder_keys`). A resumed run lists the folder again and refuses, before packing anything, when its files changed
since the run began: a different set of samples cannot continue the run bit for bit. An unchanged folder whose
pack the bound removed is packed again (the same files at the same options) and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufeed.data.feed.crops import CENTRE_FRACTION
from gpufeed.data.pack.cache import PackOptions, folder_key, pack_cached, release_pack
from gpufeed.errors import ConfigError
from gpufeed.train.config import TrainConfig
from gpufeed.train.events import FolderPacking, FolderReady, FolderWaiting

ROLES = (("data", "--data"), ("validation", "--val"))


def is_folder(path: str | None) -> bool:
    return path is not None and path != "builtin" and Path(path).expanduser().is_dir()


def default_max_side(image_size: int) -> int:
    """The longer side a folder is packed at for `image_size` crops: the centre crop's cover, rounded up."""
    return math.ceil(image_size / CENTRE_FRACTION)


@dataclass(frozen=True)
class FolderInputs:
    """What the run opens in place of --data and --val (a folder's pack, or the path as given), the folders'
    cache keys by role ("data", "validation") for the checkpoints, and how the description names them."""

    data: str
    validation: str | None
    keys: dict[str, str] = field(default_factory=dict)
    packs: tuple[Path, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # role -> "FOLDER (packed: PACK)", for the description

    def release(self) -> None:
        """Let the cache's bound remove the packs again (this process no longer reads them)."""
        for pack in self.packs:
            release_pack(pack)


def _options(config: TrainConfig, folders: list[tuple[str, str, str]]) -> PackOptions:
    if config.image_size is None:
        _, flag, folder = folders[0]
        raise ConfigError(f"{flag} {folder} is a folder: give --image-size N (e.g. 224) to pack it into the cache "
                          f"(longer side ceil(N / 0.875), or --max-side) and train on N x N crops")
    return PackOptions(max_side=config.max_side or default_max_side(config.image_size))


def _check_unchanged(config: TrainConfig, role: str, flag: str, folder: str, key: str, saved: dict | None) -> None:
    expected = (saved or {}).get(role)
    if expected is not None and expected != key:
        raise ConfigError(f"cannot resume {config.out}: {flag} {folder} changed since the run began (files added, "
                          f"removed or modified), so it would not continue the same run; restore the folder, or train "
                          f"a new run (--overwrite, or another --out)")


def _stop_if(asked: Callable[[], bool]) -> None:
    if asked():
        raise KeyboardInterrupt  # a signal while packing or waiting: the pack is left unwritten (atomic)


def resolve_folders(config: TrainConfig, saved_keys: dict | None, notify: Callable[[object], None],
                    stop_asked: Callable[[], bool] = lambda: False) -> FolderInputs:
    """Pack (or find) each folder among --data and --val; `saved_keys`: a resumed run's, checked first.
    `stop_asked()` (a signal came) is polled while packing and waiting: then KeyboardInterrupt."""
    paths = {"data": config.data, "validation": config.validation}
    folders = [(role, flag, paths[role]) for role, flag in ROLES if is_folder(paths[role])]
    if not folders:
        if config.max_side is not None:
            raise ConfigError("--max-side sets the side a folder given as --data or --val is packed at; "
                              "neither is a folder here (pack files keep the side they were packed at)")
        return FolderInputs(config.data, config.validation)
    options = _options(config, folders)
    keys = {role: folder_key(folder, options) for role, _, folder in folders}
    for role, flag, folder in folders:  # all of them before packing any
        _check_unchanged(config, role, flag, folder, keys[role].key, saved_keys)
    packs, labels = [], {}
    try:
        for role, _, folder in folders:
            def progress(done: int, total: int, role=role, folder=folder) -> None:
                _stop_if(stop_asked)
                notify(FolderPacking(role, folder, done, total))

            def waiting(lock: Path, waited_s: float, role=role, folder=folder) -> None:
                _stop_if(stop_asked)
                if waited_s == 0:
                    notify(FolderWaiting(role, folder, str(lock)))

            cached = pack_cached(folder, options, key=keys[role], progress=progress, on_wait=waiting)
            packs.append(cached.path)
            paths[role] = str(cached.path)
            labels[role] = f"{folder} (packed: {cached.path})"
            notify(FolderReady(role, folder, cached))
    except BaseException:
        for pack in packs:
            release_pack(pack)
        raise
    return FolderInputs(paths["data"], paths["validation"], {role: key.key for role, key in keys.items()},
                        tuple(packs), labels)
