"""The training DataLoader's workers' private memory through the watch, and what the Dataset holds that they can
copy: the readings findings/kinds/worker_memory.py projects to the end of the epoch.

Why it grows: a forked worker shares the parent's pages until it writes one, and reading a Python object writes its
reference count, so a Dataset that holds lists or dicts of Python objects is copied page by page into every worker
as it reads them ("copy-on-read", pytorch/pytorch#13246). A worker can copy at most what those objects occupy in the
parent, so `dataset_objects` measures that: each attribute of the Dataset (and of the Dataset a Subset wraps) that
is a list, tuple, dict or set of at least MANY_OBJECTS items, its length and an estimate of the bytes of its items
and what they hold one level down (getsizeof over SAMPLE items spread through it, each rounded up to the block
pymalloc gives it, scaled to its length; small ints, None and booleans are shared singletons and not counted; arrays
and tensors keep their data outside the objects and are not counted).

`WorkerMemory` follows the training iterator's worker processes (from its first training batch): a thread reads
each worker's USS (the pages only it holds: Linux's smaps_rollup, else psutil's memory_full_info; PSS where the
OS gives no USS) and the main process's every INTERVAL_S, with the count of training batches handed out so far,
until the watch ends; and once as soon as every worker has handed over a batch, so that the projection's baseline
(findings/kinds/worker_memory.py) is at the same point of the epoch however fast the loop runs: read on the interval
alone, it came at batch 3 of a loaded run and batch 20 of an idle one, and the projection's one-parameter fit of
the copying moved with it (a tenth more from a later baseline, on tests/doctor/scripts/copy_on_read.py).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from typing import Any

from gpufeed.doctor.observation import DatasetAttribute, WorkerMemoryReading
from gpufeed.doctor.observe.clock import loader_batch_size
from gpufeed.torchrun import launch

# gpufeed's choice: a fast loop watches its 50 steps in half a second, and the projection needs several readings
# past the workers' start-up; a reading costs the kernel's walk of the worker's page tables (about 9 ms for a
# 500 MiB worker on this project's 2-core VM), off the training thread but on the host's cores.
INTERVAL_S = 0.1
MANY_OBJECTS = 1000  # gpufeed's choice: fewer objects than this cannot copy a worker's memory noticeably
SAMPLE = 2000
SINGLETONS = (type(None), bool)
PYMALLOC_ALIGNMENT, PYMALLOC_LARGEST = 16, 512  # Objects/obmalloc.c: ALIGNMENT, SMALL_REQUEST_THRESHOLD


def _object_bytes(value: Any, seen: set[int]) -> int:
    """getsizeof of a Python object not seen before, leaving out shared singletons, small ints and array data."""
    if id(value) in seen or isinstance(value, SINGLETONS) or (isinstance(value, int) and -5 <= value <= 256):
        return 0
    if type(value).__module__ in ("numpy", "torch"):  # data outside the object: no reference count on it
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    # CPython's small-object allocator (pymalloc) hands out blocks of up to 512 bytes in 16-byte steps
    return -(-size // PYMALLOC_ALIGNMENT) * PYMALLOC_ALIGNMENT if size <= PYMALLOC_LARGEST else size


def _item_bytes(item: Any, seen: set[int]) -> int:
    """An item and what it holds one level down (a record: a tuple of a path and a label, a dict of fields)."""
    total = _object_bytes(item, seen)
    if isinstance(item, dict):
        for key, value in item.items():
            total += _object_bytes(key, seen) + _object_bytes(value, seen)
    elif isinstance(item, (list, tuple, set, frozenset)):
        for element in itertools.islice(item, 64):
            total += _object_bytes(element, seen)
    return total


def _container_bytes(container: Any) -> int:
    """The estimated bytes of a container's items (SAMPLE of them, spread through it, scaled to its length)."""
    length = len(container)
    seen: set[int] = set()
    if isinstance(container, dict):  # its keys and values (and what a value holds), not the pairs items() makes
        pairs = list(itertools.islice(container.items(), SAMPLE))
        sampled = sum(_object_bytes(key, seen) + _item_bytes(value, seen) for key, value in pairs)
        return int(sampled * length / len(pairs)) if pairs else 0
    if isinstance(container, (list, tuple)):
        step = max(1, length // SAMPLE)
        items = [container[index] for index in range(0, length, step)][:SAMPLE]
    else:
        items = list(itertools.islice(container, SAMPLE))
    sampled = sum(_item_bytes(item, seen) for item in items)
    return int(sampled * length / len(items)) if items else 0


def _objects(dataset: Any) -> tuple[DatasetAttribute, ...]:
    """dataset_objects, or none when the Dataset's attributes cannot be walked (a reading never breaks a run)."""
    try:
        return dataset_objects(dataset) if dataset is not None else ()
    except Exception:  # noqa: BLE001
        return ()


def dataset_objects(dataset: Any) -> tuple[DatasetAttribute, ...]:
    """The Dataset's attributes that hold many Python objects (the module docstring), the largest first."""
    found = []
    datasets = [dataset]
    inner = getattr(dataset, "dataset", None)
    if inner is not None and inner is not dataset:
        datasets.append(inner)
    for owner in datasets:
        try:
            attributes = vars(owner)
        except TypeError:
            continue
        for name, value in attributes.items():
            if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) >= MANY_OBJECTS:
                prefix = "" if owner is dataset else "dataset."
                found.append(DatasetAttribute(prefix + name, type(value).__name__, len(value), _container_bytes(value)))
    return tuple(sorted(found, key=lambda a: -a.bytes))


def _length(value: Any) -> int | None:
    """len(value), or None where it has none (an IterableDataset, its infinite sampler) or it raises."""
    try:
        return len(value)
    except Exception:  # noqa: BLE001 - the user's __len__: never break the run for a reading
        return None


def private_bytes(process) -> int | None:
    """A process's USS: Linux's /proc/PID/smaps_rollup (Private_Clean + Private_Dirty: one read the kernel sums,
    cheap beside the watched steps), else psutil's memory_full_info (USS, else PSS); None when it cannot be read."""
    if process is None:
        return None
    try:
        with open(f"/proc/{process.pid}/smaps_rollup", encoding="ascii") as rollup:
            fields = dict(line.split(":", 1) for line in rollup if ":" in line)
        return 1024 * sum(int(fields[key].split()[0]) for key in ("Private_Clean", "Private_Dirty"))
    except (OSError, KeyError, ValueError):
        pass
    try:
        info = process.memory_full_info()
    except Exception:  # noqa: BLE001 - a worker that ended, or no permission: no reading
        return None
    return int(getattr(info, "uss", None) or getattr(info, "pss", None) or info.rss)


def _ranks_on_node() -> int:
    """torchrun's LOCAL_WORLD_SIZE (1 alone, or when the environment cannot be read: a reading never fails)."""
    try:
        return launch().local_world_size
    except ValueError:  # torchrun.launch's ConfigError
        return 1


class WorkerMemory:
    """The readings of one training iterator's workers (the module docstring); `reading()` gives them typed."""

    def __init__(self) -> None:
        self._iterator_id: int | None = None
        self._processes: list = []
        self._main = None
        self._samples: list[tuple[float, int, int | None, tuple[int | None, ...]]] = []
        self._batches = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # a reading now: the baseline's (findings/kinds/worker_memory.py), or the last
        self._lock = threading.Lock()
        self._about: dict = {}
        self.problem: str | None = None

    def on_training_batch(self, iterator: Any) -> None:
        """A training batch from `iterator`: follow its workers from the first one (a new iterator: a new epoch's
        workers, followed afresh), and count the batch."""
        with self._lock:
            self._batches += 1
            if self._processes and self._batches == len(self._processes) + 1:  # each worker handed one over
                self._wake.set()
        if iterator is None or id(iterator) == self._iterator_id or self._stop.is_set():
            return
        workers = getattr(iterator, "_workers", None)
        if not workers:
            return
        import psutil

        try:
            processes = [psutil.Process(worker.pid) for worker in workers]
            self._main = psutil.Process(os.getpid())
        except Exception as error:  # noqa: BLE001 - psutil cannot see them: said in the notes
            self.problem = f"the workers' memory could not be read ({type(error).__name__}: {error})"
            return
        dataset = getattr(iterator, "_dataset", None)
        length = _length(dataset)  # an IterableDataset has none
        epoch_batches = _length(iterator)
        with self._lock:
            self._iterator_id, self._processes, self._samples, self._batches = id(iterator), processes, [], 1
            self._about = {"dataset_length": length, "epoch_batches": epoch_batches,
                           "batch_size": loader_batch_size(iterator),
                           "attributes": _objects(dataset),
                           "prefetch_factor": getattr(iterator, "_prefetch_factor", None)}
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufeed-worker-memory", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        start = time.perf_counter()
        while not self._stop.is_set():
            with self._lock:
                workers, main, batches = list(self._processes), self._main, self._batches
            readings = tuple(private_bytes(worker) for worker in workers)
            with self._lock:
                if workers == self._processes:
                    self._samples.append((time.perf_counter() - start, batches, private_bytes(main), readings))
            self._wake.wait(INTERVAL_S)
            self._wake.clear()

    def stop(self) -> None:
        """End the readings (the watch is over); one last reading is taken first."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            with self._lock:
                readings = tuple(private_bytes(worker) for worker in self._processes)
                if self._samples and all(value is not None for value in readings):
                    self._samples.append((self._samples[-1][0] + INTERVAL_S, self._batches,
                                          private_bytes(self._main), readings))

    def reading(self) -> WorkerMemoryReading | None:
        """What was read, or None when no training iterator with workers was followed."""
        import psutil

        with self._lock:
            if not self._processes:
                return None
            samples = tuple(sample for sample in self._samples if all(value is not None for value in sample[3]))
            about = dict(self._about)
            workers = len(self._processes)
        try:
            available = int(psutil.virtual_memory().available)
        except Exception:  # noqa: BLE001
            available = None
        return WorkerMemoryReading(samples, workers, about["dataset_length"], about["epoch_batches"],
                                   about["batch_size"], about["attributes"], available,
                                   _ranks_on_node(), about["prefetch_factor"])
