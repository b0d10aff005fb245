"""The pack cache: a folder of images packed once into the cache folder and reused while its files stay the same.

Where: `$GPUFEED_CACHE`, else `$XDG_CACHE_HOME/gpufeed`, else `~/.cache/gpufeed` (`cache_folder`); the built-in
dataset's packs (train/inputs.py) live there too.

The key: sha256 of the folder's resolved path, its listing as `pack_folder` lists it (`images.list_folder`: the
images packed and the other files it skips), each file's path relative to the folder, size and mtime in
nanoseconds, the pack options (`PackOptions`: max side, encoding, quality, channels) and the versions of the
format and of this cache. A file touched, added or removed gives another key, so the folder is packed again; an
untouched folder finds its pack. The pack is `NAME-KEY.gpuf` (NAME the folder's name), written atomically by
`pack_folder`; `NAME-KEY.json` beside it is its manifest (the folder, the key's inputs, the pack's size, when it
was made and last used), written atomically after the pack, so a pack without its manifest is packed again.

Processes: each process that wants a folder takes the key's file lock (`NAME-KEY.lock`, filelock) and waits
while another holds it; whoever takes it first packs, the rest find the pack done. Ranks of a torchrun job on one
machine thus pack once and read the same file. While a process uses a pack it holds a shared lock (flock) on the
pack file, from `pack_cached` until `release_pack` or its exit.

The bound: after a pack is added or reused, the least recently used packs (their manifests' last use) are
removed while the cache folder's files exceed the limit (`$GPUFEED_CACHE_LIMIT`: bytes, or a size such as
"20GB" or "500MiB"; default 50 GB); never the pack just made or reused, one being packed (its key lock is held)
or one in use (its shared lock is held). Packs without a manifest (the built-in ones) count but are not removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from filelock import FileLock, Timeout

from gpufeed.atomic import write_text_atomic
from gpufeed.data.format.header import read_header
from gpufeed.data.format.layout import TABLE_VERSION
from gpufeed.data.pack.encode import DEFAULT_QUALITY
from gpufeed.data.pack.folder import pack_folder
from gpufeed.data.pack.images import list_folder
from gpufeed.data.pack.result import PackResult, Progress, SkippedFile
from gpufeed.errors import ConfigError, FormatError

try:
    import fcntl
except ImportError:  # not POSIX: packs in use are not marked, and eviction cannot see them
    fcntl = None

CACHE_VERSION = 1  # of the key and the manifest: raise it when packing a folder writes something else
DEFAULT_LIMIT_BYTES = 50 * 10**9
KEY_CHARACTERS = 16  # of the sha256 in hex: 64 bits
WAIT_POLL_S = 1.0  # how often a process waiting for another's packing calls back
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_held: dict[str, int] = {}  # pack path -> the descriptor holding its shared lock in this process


def cache_folder() -> Path:
    """$GPUFEED_CACHE, else $XDG_CACHE_HOME/gpufeed, else ~/.cache/gpufeed."""
    if os.environ.get("GPUFEED_CACHE"):
        return Path(os.environ["GPUFEED_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpufeed"


def parse_size(text: str) -> int:
    """Bytes from "123", "20GB" (10^9), "20 GiB" (2^30), "1.5TB"; ConfigError naming GPUFEED_CACHE_LIMIT."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ConfigError(f"GPUFEED_CACHE_LIMIT={text!r} is not a size; give bytes or a size such as 20GB or "
                          f"500MiB")
    return int(float(match.group(1)) * _UNITS[unit])


def cache_limit_bytes() -> int:
    """$GPUFEED_CACHE_LIMIT in bytes, else DEFAULT_LIMIT_BYTES."""
    text = os.environ.get("GPUFEED_CACHE_LIMIT")
    return DEFAULT_LIMIT_BYTES if not text else parse_size(text)


@dataclass(frozen=True)
class PackOptions:
    """How a folder is packed into the cache: JPEG at `quality`, longer side at most `max_side`."""

    max_side: int
    quality: int = DEFAULT_QUALITY
    channels: int = 3
    encoding: str = "jpeg"

    def __post_init__(self):
        if not isinstance(self.max_side, int) or self.max_side <= 0:
            raise ConfigError(f"max_side must be a positive number of pixels, got {self.max_side!r}",
                              command_line=f"--max-side must be a positive number of pixels, got {self.max_side!r}")


@dataclass(frozen=True)
class FolderKey:
    """A folder's state as the cache keys it: `key` (hex) from the listed files' paths, sizes and mtimes and the
    options; `files` counts the files listed (images and others), `bytes` their sizes."""

    folder: str  # resolved
    key: str
    files: int
    images: int
    bytes: int
    newest_mtime_ns: int
    options: PackOptions

    @property
    def name(self) -> str:
        """The stem of the pack, its manifest and its lock in the cache folder."""
        return f"{Path(self.folder).name or 'folder'}-{self.key}"


def folder_key(folder: str | os.PathLike, options: PackOptions) -> FolderKey:
    """The key of `folder` packed with `options`: one listing and one stat per file, no file is read."""
    resolved = Path(folder).expanduser().resolve()
    if not resolved.is_dir():
        raise ConfigError(f"{folder} is not a folder; give a folder with one subfolder of images per class")
    try:
        listing = list_folder(str(resolved))
    except ValueError as error:
        raise ConfigError(str(error)) from None
    except OSError as error:
        raise ConfigError(f"cannot list {folder} ({error}); check that it is readable") from None
    digest = hashlib.sha256()
    head = {"cache_version": CACHE_VERSION, "format_version": TABLE_VERSION, "folder": str(resolved),
            "options": asdict(options)}
    digest.update(json.dumps(head, sort_keys=True).encode())
    total, newest = 0, 0
    paths = [*listing.files, *(path for path, _ in listing.not_images)]
    for path in paths:
        try:
            status = os.stat(path)
        except OSError as error:
            raise ConfigError(f"{path} could not be read while listing {folder} ({error}); run again") from None
        total += status.st_size
        newest = max(newest, status.st_mtime_ns)
        entry = [os.path.relpath(path, resolved), status.st_size, status.st_mtime_ns]
        digest.update(json.dumps(entry).encode() + b"\n")
    return FolderKey(str(resolved), digest.hexdigest()[:KEY_CHARACTERS], len(paths), len(listing.files), total,
                     newest, options)


@dataclass(frozen=True)
class RemovedPack:
    """A pack the bound removed: its file, the folder it was packed from, its bytes (pack and manifest), its last
    use (ISO 8601, UTC)."""

    path: Path
    folder: str
    bytes: int
    last_used: str


@dataclass(frozen=True)
class CachedPack:
    """A folder's pack in the cache. `reused`: found there (packed earlier, or by another process while this one
    waited `waited_s` on its lock); `result`: the pack's PackResult when this call packed it, else None; `count`
    its samples and `pack_bytes` its size; `skipped` the files its packing skipped (kept in the manifest);
    `removed`: what the bound removed after; `cache_bytes`: the cache folder's files after that."""

    path: Path
    reused: bool
    count: int
    pack_bytes: int
    skipped: tuple[SkippedFile, ...]
    result: PackResult | None
    removed: tuple[RemovedPack, ...]
    key: FolderKey
    waited_s: float
    cache: Path
    cache_bytes: int
    limit_bytes: int


def _now() -> tuple[str, int]:
    nanoseconds = time.time_ns()
    stamp = datetime.fromtimestamp(nanoseconds / 1e9, timezone.utc).isoformat(timespec="seconds")
    return stamp, nanoseconds


def _read_manifest(path: Path) -> dict | None:
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("cache_version") == CACHE_VERSION else None


def _write_manifest(path: Path, key: FolderKey, pack: Path, count: int, skipped: list,
                    created: str | None = None) -> dict:
    stamp, nanoseconds = _now()
    manifest = {"cache_version": CACHE_VERSION, "folder": key.folder, "key": key.key, "pack": pack.name,
                "inputs": {"files": key.files, "images": key.images, "bytes": key.bytes,
                           "newest_mtime_ns": key.newest_mtime_ns, "options": asdict(key.options),
                           "format_version": TABLE_VERSION},
                "count": count, "skipped": skipped, "pack_bytes": pack.stat().st_size, "created": created or stamp,
                "last_used": stamp, "last_used_ns": nanoseconds}
    write_text_atomic(path, json.dumps(manifest, indent=1) + "\n")
    return manifest


def _found(pack: Path, manifest_path: Path, key: FolderKey) -> int | None:
    """The sample count of a complete pack of `key`, or None (absent, without its manifest, or damaged)."""
    manifest = _read_manifest(manifest_path)
    if manifest is None or manifest.get("key") != key.key:
        return None
    try:
        return read_header(pack).count
    except FormatError:
        return None


def _hold(pack: Path) -> None:
    """Take a shared lock on `pack` for this process (eviction elsewhere then leaves it)."""
    if fcntl is None or str(pack) in _held:
        return
    descriptor = os.open(pack, os.O_RDONLY)
    fcntl.flock(descriptor, fcntl.LOCK_SH)
    _held[str(pack)] = descriptor


def release_pack(pack: str | os.PathLike) -> None:
    """Let go of this process's shared lock on a pack from `pack_cached` (the bound may then remove it)."""
    descriptor = _held.pop(str(pack), None)
    if descriptor is not None:
        os.close(descriptor)


def _take_lock(lock: FileLock, on_wait: Callable[[Path, float], None] | None) -> float:
    """Acquire `lock`, calling `on_wait(lock path, seconds waited)` when another process holds it and about every
    WAIT_POLL_S while it waits (it may raise to stop waiting); the seconds waited."""
    started = time.monotonic()
    try:
        lock.acquire(timeout=0)
        return 0.0
    except Timeout:
        waited_s = 0.0
    while True:
        if on_wait is not None:
            on_wait(Path(lock.lock_file), waited_s)
        try:
            lock.acquire(timeout=WAIT_POLL_S)
            return time.monotonic() - started
        except Timeout:
            waited_s = time.monotonic() - started


def pack_cached(folder: str | os.PathLike, options: PackOptions, *, key: FolderKey | None = None,
                progress: Progress | None = None, on_wait: Callable[[Path, float], None] | None = None,
                workers: int | None = None, cache: str | os.PathLike | None = None,
                limit_bytes: int | None = None) -> CachedPack:
    """The pack of `folder` in the cache: found, or packed now (`pack_folder`, JPEG at `options`); then the bound.

    `key` (from `folder_key`) saves listing the folder twice; `progress(done, total)` while packing;
    `on_wait(lock_path, waited_s)` while another process is packing it (first with 0 seconds; either callback may
    raise to stop, leaving nothing at the pack's path); `cache` and `limit_bytes` default to
    `cache_folder()` and `cache_limit_bytes()`. The pack stays locked in use by this process until `release_pack`.
    """
    cache = Path(cache).expanduser() if cache is not None else cache_folder()
    limit_bytes = cache_limit_bytes() if limit_bytes is None else int(limit_bytes)
    key = key or folder_key(folder, options)
    if cache.resolve().is_relative_to(key.folder):
        raise ConfigError(f"the cache folder {cache} is inside {folder}, which it would pack; set GPUFEED_CACHE to "
                          f"a folder outside it")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the cache folder {cache} ({error}); set GPUFEED_CACHE to a writable "
                          f"folder") from None
    pack, manifest_path = cache / f"{key.name}.gpuf", cache / f"{key.name}.json"
    lock = FileLock(cache / f"{key.name}.lock")
    waited_s = _take_lock(lock, on_wait)
    try:
        count, result = _found(pack, manifest_path, key), None
        earlier = (_read_manifest(manifest_path) or {}) if count is not None else {}
        if count is None:
            result = pack_folder(key.folder, pack, channels=options.channels, workers=workers, progress=progress,
                                 max_side=options.max_side, encoding=options.encoding, quality=options.quality)
            skipped = [[item.path, item.reason] for item in result.skipped]
        else:
            skipped = [list(item) for item in earlier.get("skipped", []) if isinstance(item, list) and len(item) == 2]
        manifest = _write_manifest(manifest_path, key, pack, result.count if result else count, skipped,
                                   earlier.get("created"))
        _hold(pack)
    finally:
        lock.release()
    removed, cache_bytes = enforce_limit(cache, limit_bytes, keep=pack)
    return CachedPack(pack, result is None, manifest["count"], manifest["pack_bytes"],
                      tuple(SkippedFile(str(path), str(reason)) for path, reason in skipped), result, removed, key,
                      waited_s, cache, cache_bytes, limit_bytes)


def _folder_bytes(cache: Path) -> int:
    total = 0
    for root, _folders, names in os.walk(cache):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _exclusive(pack: Path) -> int | None:
    """A descriptor holding an exclusive lock on `pack`, or None when a process uses it (or it is gone)."""
    try:
        descriptor = os.open(pack, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is None:
        return descriptor
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def _remove_unused(pack: Path, manifest_path: Path) -> int | None:
    """Remove a pack and its manifest unless it is being packed or used; the bytes freed, or None."""
    lock = FileLock(pack.with_suffix(".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    try:
        descriptor = _exclusive(pack)
        if descriptor is None:
            return None
        try:
            freed = 0
            for path in (pack, manifest_path):
                with contextlib.suppress(OSError):
                    freed += path.stat().st_size
                    path.unlink()
            return freed
        finally:
            os.close(descriptor)
    finally:
        lock.release()


def enforce_limit(cache: str | os.PathLike, limit_bytes: int,
                  keep: str | os.PathLike | None = None) -> tuple[tuple[RemovedPack, ...], int]:
    """Remove the least recently used packs of folders while the cache's files exceed `limit_bytes`; never
    `keep`, one being packed or one in use. What was removed (oldest first), and the bytes the cache then holds."""
    cache = Path(cache)
    keep = Path(keep) if keep is not None else None
    with FileLock(cache / ".bound.lock"):  # one process at a time counts and removes
        total = _folder_bytes(cache)
        if total <= limit_bytes:
            return (), total
        manifests = []
        for path in cache.glob("*.json"):
            manifest = _read_manifest(path)
            if manifest is not None and (cache / str(manifest.get("pack"))) != keep:
                manifests.append((int(manifest.get("last_used_ns", 0)), path, manifest))
        removed = []
        for _, path, manifest in sorted(manifests, key=lambda item: item[:2]):
            if total <= limit_bytes:
                break
            pack = cache / str(manifest["pack"])
            freed = _remove_unused(pack, path)
            if freed is not None:
                total -= freed
                removed.append(RemovedPack(pack, str(manifest.get("folder")), freed, str(manifest.get("last_used"))))
        return tuple(removed), total


@dataclass(frozen=True)
class CacheSummary:
    """The cache folder as `gpufeed info` shows it: `bytes` of all its files, `packs` (.gpuf files: folders'
    and the built-in's), `folder_packs` (those with a manifest, which the bound may remove), the limit."""

    path: str
    exists: bool
    bytes: int
    packs: int
    folder_packs: int
    limit_bytes: int


def cache_summary(cache: str | os.PathLike | None = None) -> CacheSummary:
    """Read the cache folder (nothing is created or changed)."""
    cache = Path(cache).expanduser() if cache is not None else cache_folder()
    packs = sorted(cache.glob("*.gpuf")) if cache.is_dir() else []
    with_manifest = sum(1 for pack in packs if _read_manifest(pack.with_suffix(".json")) is not None)
    return CacheSummary(str(cache), cache.is_dir(), _folder_bytes(cache) if cache.is_dir() else 0, len(packs),
                        with_manifest, cache_limit_bytes())
