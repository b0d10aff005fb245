"""`Feed`: batches from a packed dataset to the device, with the CPU and the device overlapping.

Per batch (docs/design.md, "The flow of one training step"): the order says which samples; a staging thread
gathers them as uint8 into a ring slot (pinned memory when the device is a CUDA GPU); the slot is copied to the
device on a side stream with an event; augmentation runs on the device on the whole batch, after that event.
If the dataset fits in device memory with room to spare it is moved there once and batches are gathered on the
device. On the CPU the same stages run on the staging threads, so the consumer receives finished float batches.

With a resized-crop augment ("random-resized-crop", "centre-crop", for photos of any size) the staging threads
also crop each sample (decoding JPEG samples) and resize it into the slot (`cpu_resize.py`, boxes from
`crops.py`); the device then flips, converts and normalises the uint8 batch as for fixed-size data. With
`decode="gpu"` JPEG bytes cross the bus instead, and the device decodes, crops and resizes (`gpu/`).
On the CPU the staging threads mirror each flipped crop as they resize it, and write the float batch into
memory an `OutputPool` lends again once the consumer has dropped the batch (staging.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np
import torch

from gpufeed.data.feed import augment as transforms
from gpufeed.data.feed import crops
from gpufeed.data.feed.cpu_resize import CropResizer
from gpufeed.data.feed.draws import Draws
from gpufeed.data.feed.gpu.batches import choose_decode, gpu_decoded_batches
from gpufeed.data.feed.gpu.byte_staging import ByteSlot, initial_capacity, stage_batch_bytes
from gpufeed.data.feed.order import EpochOrder, batches_per_epoch, check_order_arguments, epoch_order
from gpufeed.data.feed.staging import OutputPool, SlotPool, Staging
from gpufeed.data.feed.transfer import DeviceTransfer, HostSlot, ResidentData, fits_on_device
from gpufeed.data.format.reader import PackedDataset, dataset_from_arrays, open_packed
from gpufeed.errors import ConfigError
from gpufeed.hardware.devices import resolve_device

STATE_KEYS = ("epoch", "position", "seed", "batch_size", "world_size", "count", "shuffle", "drop_last")


def default_workers() -> int:
    return max(1, min(4, (os.cpu_count() or 2) // 2))


class Feed:
    """An iterable of `(images, labels)` batches: images (B, C, H, W) on `device`, labels (B,) int64.

    Images are float32 (or `dtype`), normalised with the dataset's per-channel mean and std (or scaled to
    0..1 with `normalize=False`), in channels_last memory unless `channels_last=False`.

    `len(feed)` is batches per epoch for this rank. An exhausted iteration advances to the next epoch;
    `set_epoch(e)` sets it explicitly. `state_dict()` records the epoch and the next unseen batch, and
    `load_state_dict()` resumes there: the resumed batches equal the ones an uninterrupted run would see.

    `augment="random-resized-crop"` (torchvision's RandomResizedCrop and a horizontal flip; "-noflip" without
    the flip) or `"centre-crop"` (validation) resize every sample to `image_size` (an int or (H, W)), which
    variable-size data requires. `notes` holds one-line remarks on the settings (e.g. upscaling) for the
    caller to show. `decode` ("auto", "cpu", "gpu"): where JPEG samples are decoded; "auto" decodes on the GPU
    (nvImageCodec, `pip install 'gpufeed[nvjpeg]'`) on a CUDA device when it is installed, else on CPU threads.
    """

    def __init__(self, source: str | os.PathLike | PackedDataset, batch_size: int, device: str = "auto",
                 shuffle: bool = True, seed: int = 0, drop_last: bool = True, augment: str | None = "crop+flip",
                 normalize: bool = True, dtype: torch.dtype | None = None, prefetch: int = 4,
                 ram_budget_bytes: int | None = None, rank: int = 0, world_size: int = 1,
                 workers: int | None = None, padding: int = 4, resident: bool | str = "auto",
                 channels_last: bool | None = None, verify: bool = False, indices=None, image_size=None,
                 decode: str = "auto"):
        if isinstance(source, PackedDataset):
            self.dataset = source
        else:
            self.dataset = open_packed(source, verify=verify, ram_budget_bytes=ram_budget_bytes)
        self.device = resolve_device(device)
        self.indices = None if indices is None else np.asarray(indices, dtype=np.int64)
        if self.indices is not None and (self.indices.ndim != 1 or len(self.indices) == 0
                                         or self.indices.min() < 0 or self.indices.max() >= len(self.dataset)):
            raise ConfigError(f"indices must be a non-empty 1-D array of sample numbers in 0..{len(self.dataset) - 1}")
        self.batch_size, self.seed, self.shuffle, self.drop_last = batch_size, int(seed), bool(shuffle), bool(drop_last)
        self.rank, self.world_size = int(rank), int(world_size)
        check_order_arguments(self.count, batch_size, self.rank, self.world_size, self.drop_last)
        self._setup_augment(augment, padding, image_size)
        if prefetch < 1:
            raise ConfigError(f"prefetch must be at least 1 batch, got {prefetch}")
        self.prefetch = int(prefetch)
        self.workers = default_workers() if workers is None else int(workers)
        if self.workers < 1:
            raise ConfigError(f"workers must be at least 1, got {self.workers}")
        choice = choose_decode(decode, self.device, self.dataset, self.resized, self.workers)
        self.decode, self._gpu_decoder, self.notes = choice.mode, choice.decoder, self.notes + choice.notes
        self.dtype = dtype or torch.float32
        if not self.dtype.is_floating_point:
            raise ConfigError(f"dtype must be a floating type such as torch.float32 or torch.bfloat16, "
                              f"got {self.dtype}")
        self.channels_last = True if channels_last is None else bool(channels_last)
        self.normalize = normalize
        mean = torch.tensor(self.dataset.mean, dtype=torch.float64)
        std = torch.tensor(self.dataset.std, dtype=torch.float64).clamp_min(1e-3)
        # x * scale + shift == (x - mean) / std, with the per-channel constants from the packed header
        self._scale = (1.0 / std).to(self.device, self.dtype) if normalize else None
        self._shift = (-mean / std).to(self.device, self.dtype) if normalize else None
        self.resident = self._decide_resident(resident)
        self._resident_data: ResidentData | None = None
        # the CPU path's ring slots and float batches, kept from epoch to epoch: fresh memory costs page faults
        self._host_memory = OutputPool(2 * (self.prefetch + self.workers) + 2)
        self.epoch, self.position = 0, 0

    def _setup_augment(self, augment: str | None, padding: int, image_size) -> None:
        """Sets `plan` (the crop and flip done on the device), and for a resized-crop augment `resized` (its
        plan) and `cropper` (what crops and resizes on the staging threads)."""
        self.resized, self.cropper, self.notes = None, None, ()
        name, fixed = self.dataset.path or "the dataset", self.dataset.is_fixed_size
        varying = (f"{name} holds images of varying sizes (up to {self.dataset.max_shape[0]}x"
                   f"{self.dataset.max_shape[1]}): pass image_size=224 (or (H, W))")
        if augment not in crops.RESIZED_AUGMENTS:
            self.plan = transforms.parse_augment(augment, padding)
            if not fixed:
                raise ConfigError(f"{varying} with augment='random-resized-crop' for training or 'centre-crop' "
                                  f"for validation")
            if self.dataset.images is None:
                raise ConfigError(f"{name} is a version-2 pack: augment={augment!r} needs a version-1 pack; use "
                                  f"augment='random-resized-crop' or 'centre-crop'")
            if image_size is not None:
                raise ConfigError(f"image_size is for augment='random-resized-crop' or 'centre-crop', not "
                                  f"{augment!r}; choose one of those or leave image_size out")
            return
        if image_size is None and not fixed:
            raise ConfigError(f"{varying}; augment={augment!r} resizes every crop to it")
        self.cropper = CropResizer(self.dataset)
        self.resized = crops.parse_resized_crop(augment, self.dataset.shape[:2] if image_size is None else image_size)
        self.plan = transforms.parse_augment("flip" if self.resized.flip else None)
        largest = max(self.dataset.max_shape[:2])
        if max(self.resized.size) > largest:
            height, width = self.resized.size
            self.notes = (f"image_size {height}x{width} is larger than the largest packed side ({largest} "
                          f"pixels): crops are upscaled",)

    @classmethod
    def from_arrays(cls, images, labels, batch_size: int, classes=None, **options) -> Feed:
        """A feed over in-memory arrays: images (N, H, W[, C]) uint8, labels (N,) integers."""
        return cls(dataset_from_arrays(images, labels, classes), batch_size, **options)

    def _decide_resident(self, resident: bool | str) -> bool:
        if resident not in (True, False, "auto"):
            raise ConfigError(f"resident must be True, False or 'auto', got {resident!r}")
        if self.device.type != "cuda":
            return False  # on the CPU the images already live in host memory (or the page cache)
        if self.cropper is not None:
            return False  # crops are resized on the staging threads
        if resident == "auto":
            return fits_on_device(self.dataset.images_bytes, self.device)
        return bool(resident)

    # -- order and state ---------------------------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Samples this feed draws from: the dataset, or the `indices` subset of it."""
        return len(self.dataset) if self.indices is None else len(self.indices)

    def __len__(self) -> int:
        return batches_per_epoch(self.count, self.batch_size, self.world_size, self.drop_last)

    @property
    def num_classes(self) -> int:
        return len(self.dataset.classes)

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        """(C, H, W) of one image as the model receives it."""
        height, width, channels = self._staged_shape
        return channels, height, width

    @property
    def _staged_shape(self) -> tuple[int, int, int]:
        """(H, W, C) of one uint8 image in a staging slot."""
        return tuple(self.dataset.shape) if self.resized is None else (*self.resized.size, self.cropper.channels)

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.position = int(epoch), 0

    def order(self, epoch: int | None = None) -> EpochOrder:
        order = epoch_order(self.count, self.batch_size, self.seed, self.epoch if epoch is None else epoch,
                            self.rank, self.world_size, self.shuffle, self.drop_last)
        if self.indices is None:
            return order
        return EpochOrder(tuple(self.indices[batch] for batch in order.batches), order.dropped, order.repeated)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "batch_size": self.batch_size,
                "world_size": self.world_size, "count": self.count, "shuffle": self.shuffle,
                "drop_last": self.drop_last}

    def load_state_dict(self, state: dict) -> None:
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise ConfigError(f"feed state lacks {', '.join(missing)}; it was not saved by Feed.state_dict()")
        mine = self.state_dict()
        for key in STATE_KEYS[2:]:
            if state[key] != mine[key]:
                raise ConfigError(f"cannot resume: the saved feed had {key}={state[key]!r}, this one has "
                                  f"{mine[key]!r}; resume with the same data and settings")
        if not 0 <= int(state["position"]) <= len(self):
            raise ConfigError(f"feed state position {state['position']} is outside 0..{len(self)}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    # -- iteration -------------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.order()
        epoch = self.epoch
        if self.position >= len(order):
            self.epoch, self.position = epoch + 1, 0
            order, epoch = self.order(), self.epoch
        if self.resident:
            batches = self.resident_batches(order, epoch)
        elif self.decode == "gpu":
            batches = gpu_decoded_batches(self, order, epoch, self._gpu_decoder)
        elif self.device.type == "cpu":
            batches = self.host_batches(order, epoch)
        else:
            batches = self.transfer_batches(order, epoch)
        for index, images, labels in batches:
            self.position = index + 1
            yield images, labels
        if self.epoch == epoch and self.position >= len(order):
            self.epoch, self.position = epoch + 1, 0

    def batch_draws(self, epoch: int, index: int, size: int) -> Draws | None:
        """The augmentation draws of batch `index` (`size` samples), None without a crop or flip to draw for."""
        if self.plan is None:
            return None
        # this rank's slice of the step, as in the order
        return transforms.draw(self.plan, self.batch_size * self.world_size, self.seed, epoch, index,
                               start=self.rank * self.batch_size, size=size)

    def crop_boxes(self, epoch: int, index: int, indices: np.ndarray) -> np.ndarray:
        """The resized-crop boxes int64 (B, 4) of batch `index`, whose samples are `indices` (crops.py)."""
        heights, widths = self.dataset.heights[indices], self.dataset.widths[indices]
        return crops.batch_boxes(self.resized, heights, widths, self.seed, epoch, index,
                                 step=self.batch_size * self.world_size, start=self.rank * self.batch_size)

    def finish(self, images_uint8: torch.Tensor, draws: Draws | None, out: torch.Tensor | None = None) -> torch.Tensor:
        """uint8 (B, H, W, C) on the device -> augmented, normalised float (B, C, H, W), into `out` if given."""
        if draws is not None:
            images_uint8 = transforms.apply(self.plan, images_uint8, draws)
        return transforms.to_float(images_uint8, self.dtype, self._scale, self._shift, self.channels_last, out)

    def host_batches(self, order: EpochOrder, epoch: int):
        """CPU device: threads gather, augment and convert; the consumer receives finished batches. Resized
        crops are mirrored as they are resized; slots and float batches are memory lent by an `OutputPool`."""
        stop = threading.Event()
        shape, outputs = (self.batch_size, *self._staged_shape), self._host_memory
        pool = SlotPool(lambda: outputs.take(shape, torch.uint8), self.prefetch + self.workers, stop)
        images = None if self.cropper else self.dataset.images_tensor()
        labels = self.dataset.labels

        def prepare(index: int):
            indices = order.batches[index]
            slot = pool.acquire()
            try:
                batch = slot[: len(indices)]
                draws, flips = self.batch_draws(epoch, index, len(indices)), None
                if self.cropper is not None and draws is not None:
                    flips, draws = draws.flips.numpy(), None  # the "flip" augment's coins
                self._gather(images, epoch, index, indices, batch, flips)
                out = outputs.take_images(len(indices), self.sample_shape, self.dtype, self.channels_last)
                finished = self.finish(batch, draws, out)
            finally:
                pool.release(slot)
            return finished, torch.from_numpy(labels[indices])

        staging = Staging(prepare, self.position, len(order), self.workers, self.prefetch, stop)
        for index, (batch_images, batch_labels) in staging:
            yield index, batch_images, batch_labels

    def transfer_batches(self, order: EpochOrder, epoch: int):
        """GPU (or MPS): threads gather uint8 into pinned slots; copies run on a side stream; augment on device."""
        stop = threading.Event()
        transfer = DeviceTransfer(self.device, self.batch_size, self._staged_shape, lookahead=2)
        pool = SlotPool(transfer.make_host_slot, self.prefetch + self.workers + transfer.lookahead + 1, stop)
        images = None if self.cropper else self.dataset.images_tensor()

        def prepare(index: int):
            slot = pool.acquire()
            return slot, self.stage_batch(images, order, epoch, index, slot)

        staging = Staging(prepare, self.position, len(order), self.workers, self.prefetch, stop)
        for index, device_images, device_labels, device_draws in transfer.stream(staging, pool):
            yield index, self.finish(device_images, device_draws if self.plan else None), device_labels

    def staging_rate(self, seconds: float = 1.0, decode: str = "cpu") -> float:
        """Samples per second one core stages for a GPU, timed on this thread with one intra-op thread, batch after
        batch of epoch 0 (again from its start when it ends) for about `seconds`, one batch at least.
        decode="cpu": `stage_batch`, the uint8 crops decoded and resized here; "gpu": the GPU-decode path's share,
        each batch's JPEG files gathered with their boxes (`stage_batch_bytes`). Nothing is copied to a device."""
        if decode not in ("cpu", "gpu"):
            raise ConfigError(f"decode must be 'cpu' or 'gpu', got {decode!r}")
        if decode == "gpu" and (self.dataset.encoding != "jpeg" or self.resized is None):
            name = self.dataset.path or "this dataset"
            problems = ([f"{name} holds {self.dataset.encoding} samples"] if self.dataset.encoding != "jpeg" else []) \
                + (["the feed's augment has no resized crop"] if self.resized is None else [])
            raise ConfigError(f"decode='gpu' stages JPEG samples cut by a resized-crop augment, but "
                              f"{' and '.join(problems)}: use decode='cpu'")
        order, threads = self.order(0), torch.get_num_threads()
        channels, height, width = self.sample_shape
        if decode == "gpu":
            slot = ByteSlot.empty(self.batch_size, initial_capacity(self.dataset, self.batch_size), False)
            stage = lambda index: stage_batch_bytes(self, order, 0, index, slot).size  # noqa: E731
        else:
            images = None if self.cropper is not None else self.dataset.images_tensor()
            host = HostSlot.empty(self.batch_size, (height, width, channels))
            stage = lambda index: self.stage_batch(images, order, 0, index, host)  # noqa: E731
        torch.set_num_threads(1)
        try:
            samples, started, index = 0, time.perf_counter(), 0
            while index == 0 or time.perf_counter() - started < seconds:
                samples += stage(index % len(order))
                index += 1
            return samples / (time.perf_counter() - started)
        finally:
            torch.set_num_threads(threads)

    def stage_batch(self, images: torch.Tensor | None, order: EpochOrder, epoch: int, index: int, slot) -> int:
        """The CPU's whole share of the GPU path: gather batch `index` as uint8 into `slot` (a `HostSlot`),
        with its labels and augmentation draws. Returns the batch's size."""
        indices = order.batches[index]
        size = len(indices)
        self._gather(images, epoch, index, indices, slot.images[:size])
        slot.labels_numpy[:size] = self.dataset.labels[indices]
        slot.draws.head(size).copy_(self.batch_draws(epoch, index, size))
        return size

    def _gather(self, images: torch.Tensor | None, epoch: int, index: int, indices: np.ndarray,
                out: torch.Tensor, flips: np.ndarray | None = None) -> None:
        """Batch `index` as uint8 (B, H, W, C) into `out`: a gather of the packed `images`, or, with a
        resized-crop augment, each sample cropped (decoded) and resized here on the calling thread, and
        mirrored where `flips` (B,) is non-zero."""
        if self.cropper is None:
            torch.index_select(images, 0, torch.from_numpy(indices), out=out)
            return
        self.cropper.stage(indices, self.crop_boxes(epoch, index, indices), out, flips)

    def resident_batches(self, order: EpochOrder, epoch: int):
        """The whole dataset is on the device: gather each batch there, no per-step copy of images."""
        if self._resident_data is None:
            self._resident_data = ResidentData.load(self.dataset, self.device)
        data = self._resident_data
        for index in range(self.position, len(order)):
            indices = order.batches[index]
            draws = self.batch_draws(epoch, index, len(indices))
            batch_images, batch_labels, device_draws = data.gather(indices, draws)
            yield index, self.finish(batch_images, device_draws), batch_labels
