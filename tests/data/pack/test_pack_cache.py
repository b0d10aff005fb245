"""The pack cache (data/pack/cache.py): the key (touched, added, removed files and changed options repack; an
untouched folder is reused), the bound (least recently used first, exact byte counts, never the pack just made or
one in use), two processes racing for one folder, and where the cache is. Every test sets its own cache folder."""

import json
import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpufeed.data.format.header import read_header
from gpufeed.data.pack.cache import (
    DEFAULT_LIMIT_BYTES,
    PackOptions,
    cache_folder,
    cache_limit_bytes,
    cache_summary,
    enforce_limit,
    folder_key,
    pack_cached,
    parse_size,
    release_pack,
)
from gpufeed.errors import ConfigError

OPTIONS = PackOptions(max_side=32)
BIG = 10**12


def make_folder(root: Path, count: int = 6, seed: int = 0) -> Path:
    """`count` JPEGs of 2 classes at sizes 20-50 px; each a function of (seed, index)."""
    for index in range(count):
        rng = np.random.default_rng([seed, index])
        height, width = (int(v) for v in rng.integers(20, 51, size=2))
        folder = root / f"class{index % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(folder / f"{index}.jpg", quality=90)
    return root


def cached(folder: Path, cache: Path, options: PackOptions = OPTIONS, limit: int = BIG, hold: bool = False):
    result = pack_cached(folder, options, cache=cache, limit_bytes=limit, workers=0)
    if not hold:
        release_pack(result.path)
    return result


def file_sizes(cache: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in cache.iterdir() if path.is_file()}


def test_untouched_folder_is_reused_without_packing(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    assert not first.reused and first.result is not None and first.result.count == 6
    assert first.path.parent == cache and first.path.name == f"photos-{first.key.key}.gpuf"
    written = first.path.stat().st_mtime_ns, first.path.stat().st_ino
    manifest = json.loads(first.path.with_suffix(".json").read_text())
    assert manifest["folder"] == str(folder.resolve()) and manifest["key"] == first.key.key
    assert manifest["inputs"]["files"] == 6 and manifest["pack_bytes"] == first.path.stat().st_size
    second = cached(folder, cache)
    assert second.reused and second.result is None and second.path == first.path and second.count == 6
    assert (second.path.stat().st_mtime_ns, second.path.stat().st_ino) == written  # not rewritten
    used = json.loads(first.path.with_suffix(".json").read_text())
    assert used["last_used_ns"] > manifest["last_used_ns"] and used["created"] == manifest["created"]


def test_a_touched_file_repacks(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    target = folder / "class0" / "0.jpg"
    status = target.stat()
    os.utime(target, ns=(status.st_atime_ns, status.st_mtime_ns + 1))  # same bytes, one nanosecond later
    second = cached(folder, cache)
    assert not second.reused and second.result is not None and second.path != first.path


def test_added_and_removed_files_repack_and_the_old_state_finds_its_pack(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    extra = folder / "class1" / "extra.jpg"
    Image.fromarray(np.full((30, 30, 3), 7, np.uint8)).save(extra)
    added = cached(folder, cache)
    assert not added.reused and added.count == 7 and added.path != first.path
    extra.unlink()
    back = cached(folder, cache)  # the folder as it was: its first pack again
    assert back.reused and back.path == first.path
    (folder / "class0" / "2.jpg").unlink()
    removed = cached(folder, cache)
    assert not removed.reused and removed.count == 5 and removed.path not in (first.path, added.path)


def test_a_file_that_is_not_an_image_counts_in_the_key_and_a_hidden_one_does_not(tmp_path):
    """The key hashes the listing pack_folder packs: its images and the files it skips, never hidden names."""
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    (folder / "class0" / ".DS_Store").write_bytes(b"hidden")
    assert folder_key(folder, OPTIONS).key == first.key.key
    (folder / "class0" / "notes.txt").write_text("a note")
    second = cached(folder, cache)
    assert not second.reused and [item.path for item in second.result.skipped] == [
        str(folder.resolve() / "class0" / "notes.txt")]


def test_changed_options_repack(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    paths = {first.path}
    for options in (PackOptions(max_side=24), PackOptions(max_side=32, quality=70),
                    PackOptions(max_side=32, channels=1)):
        other = cached(folder, cache, options)
        assert not other.reused and other.path not in paths
        header = read_header(other.path)
        assert header.max_side == options.max_side and header.quality == options.quality
        assert header.channels == options.channels
        paths.add(other.path)
    assert cached(folder, cache).reused


def test_bad_files_are_named_in_the_result(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    (folder / "class1" / "broken.jpg").write_bytes(b"not a jpeg")
    result = cached(folder, cache).result
    assert result.count == 6
    assert [(Path(item.path).name, "not a readable image" in item.reason) for item in result.skipped] == [
        ("broken.jpg", True)]


def test_the_bound_removes_the_least_recently_used_by_exact_bytes(tmp_path):
    cache = tmp_path / "cache"
    packs = [cached(make_folder(tmp_path / name, seed=seed), cache) for seed, name in enumerate("abcd")]
    a, b, c, d = packs
    cached(tmp_path / "a", cache)  # a used again: b is now the least recently used
    sizes = file_sizes(cache)
    total = sum(sizes.values())
    pack_bytes = {pack.key.name: sizes[pack.path.name] + sizes[pack.path.with_suffix(".json").name] for pack in packs}
    assert total == sum(pack_bytes.values())  # the lock files are empty

    removed, left = enforce_limit(cache, total - pack_bytes[b.key.name], keep=d.path)  # exactly b's bytes too many
    assert [(item.path, item.bytes, item.folder) for item in removed] == [
        (b.path, pack_bytes[b.key.name], str((tmp_path / "b").resolve()))]
    assert left == total - pack_bytes[b.key.name] and not b.path.exists() and a.path.exists()

    removed, left = enforce_limit(cache, 0, keep=d.path)
    assert [item.path for item in removed] == [c.path, a.path]  # c, then a (used after c)
    assert left == pack_bytes[d.key.name] and d.path.exists()


def test_a_new_pack_is_kept_and_one_in_use_is_not_removed(tmp_path):
    cache = tmp_path / "cache"
    in_use = cached(make_folder(tmp_path / "a", seed=1), cache, hold=True)
    free = cached(make_folder(tmp_path / "b", seed=2), cache)
    new = cached(make_folder(tmp_path / "c", seed=3), cache, limit=0)
    assert [item.path for item in new.removed] == [free.path]
    assert in_use.path.exists() and new.path.exists() and not free.path.exists()
    assert new.cache_bytes == sum(file_sizes(cache).values()) > 0
    release_pack(in_use.path)
    removed, _ = enforce_limit(cache, 0, keep=new.path)
    assert [item.path for item in removed] == [in_use.path]


def _race(folder: str, cache: str, start, answers) -> None:
    start.wait()
    result = pack_cached(folder, OPTIONS, cache=cache, limit_bytes=BIG, workers=0)
    answers.put((str(result.path), result.reused, result.result is not None, result.count,
                 [Path(item.path).name for item in result.skipped]))


def test_two_processes_racing_for_one_folder_pack_it_once(tmp_path):
    folder, cache = make_folder(tmp_path / "photos", count=40), tmp_path / "cache"
    (folder / "class0" / "broken.jpg").write_bytes(b"not a jpeg")
    context = multiprocessing.get_context("spawn")
    start, answers = context.Barrier(2), context.Queue()
    workers = [context.Process(target=_race, args=(str(folder), str(cache), start, answers)) for _ in range(2)]
    for worker in workers:
        worker.start()
    results = [answers.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len({path for path, *_ in results}) == 1
    assert sorted((reused, packed) for _, reused, packed, *_ in results) == [(False, True), (True, False)]
    assert [(count, skipped) for *_, count, skipped in results] == [(40, ["broken.jpg"])] * 2  # the waiter learns it
    assert read_header(results[0][0]).count == 40
    assert sorted(path.suffix for path in cache.glob("photos-*")) == [".gpuf", ".json", ".lock"]


def test_gpufeed_cache_and_xdg_cache_home_are_honoured(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUFEED_CACHE", str(tmp_path / "mine"))
    assert cache_folder() == tmp_path / "mine"
    result = pack_cached(make_folder(tmp_path / "photos"), OPTIONS, workers=0)
    release_pack(result.path)
    assert result.path.parent == tmp_path / "mine"
    summary = cache_summary()
    assert (summary.path, summary.packs, summary.folder_packs) == (str(tmp_path / "mine"), 1, 1)
    assert summary.bytes == sum(file_sizes(tmp_path / "mine").values())
    monkeypatch.delenv("GPUFEED_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "gpufeed"
    assert not cache_summary().exists


def test_the_limit_reads_sizes(monkeypatch):
    assert parse_size("20GB") == 20 * 10**9 and parse_size("500 MiB") == 500 * 2**20
    assert parse_size("1.5TB") == 1_500_000_000_000 and parse_size("123") == 123
    monkeypatch.delenv("GPUFEED_CACHE_LIMIT", raising=False)
    assert cache_limit_bytes() == DEFAULT_LIMIT_BYTES
    monkeypatch.setenv("GPUFEED_CACHE_LIMIT", "2kB")
    assert cache_limit_bytes() == 2000
    monkeypatch.setenv("GPUFEED_CACHE_LIMIT", "lots")
    with pytest.raises(ConfigError, match="GPUFEED_CACHE_LIMIT='lots' is not a size"):
        cache_limit_bytes()


def test_a_pack_without_its_manifest_is_packed_again(tmp_path):
    """A process killed after the pack was renamed into place but before its manifest was written."""
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    first = cached(folder, cache)
    first.path.with_suffix(".json").unlink()
    again = cached(folder, cache)
    assert not again.reused and again.path == first.path and again.path.with_suffix(".json").exists()


def test_a_cache_inside_the_folder_is_refused(tmp_path):
    folder = make_folder(tmp_path / "photos")
    with pytest.raises(ConfigError, match="is inside"):
        pack_cached(folder, OPTIONS, cache=folder / "cache", workers=0)


def test_a_process_waiting_for_the_lock_is_told_and_may_stop(tmp_path):
    """Another holder of the folder's lock (here a second lock object, as another process would hold it): the
    waiter is called back at once, may stop (nothing written), or waits and finds the pack done."""
    from filelock import FileLock

    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"
    key = folder_key(folder, OPTIONS)
    cache.mkdir()
    other = FileLock(cache / f"{key.name}.lock")
    other.acquire()
    calls = []

    def stop(lock, waited_s):
        calls.append((lock, waited_s))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_cached(folder, OPTIONS, cache=cache, limit_bytes=BIG, workers=0, on_wait=stop)
    assert calls == [(cache / f"{key.name}.lock", 0.0)] and not list(cache.glob("*.gpuf"))
    other.release()
    first = cached(folder, cache)
    other.acquire()

    def finish(lock, waited_s):  # the other process is done: it lets go
        other.release()

    again = pack_cached(folder, OPTIONS, cache=cache, limit_bytes=BIG, workers=0, on_wait=finish)
    release_pack(again.path)
    assert again.reused and again.path == first.path and again.waited_s > 0


def test_a_pack_stopped_by_its_progress_callback_leaves_nothing_and_frees_the_lock(tmp_path):
    folder, cache = make_folder(tmp_path / "photos"), tmp_path / "cache"

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_cached(folder, OPTIONS, cache=cache, limit_bytes=BIG, workers=0, progress=stop)
    assert [path.suffix for path in cache.iterdir()] == [".lock"]  # the key's lock only: no pack, no temporary
    assert not cached(folder, cache).reused  # packed now: the lock was let go
