"""gpufeed: keep the accelerator fed, and say with measurements what a training needs.

The public names: `Feed` (batches from a packed dataset to the device), `pack` (write a `.gpuf`),
`open_packed`, `train` with `TrainConfig`, and the errors. Heavy modules (torch) load on first use, so the
command line starts fast.
"""

from gpufeed.errors import ConfigError, DeviceUnavailable, FormatError, GpufeedError, RunFailed, StagingError

__version__ = "0.1.0"

_LAZY = {
    "Feed": ("gpufeed.data.feed.feed", "Feed"),
    "pack": ("gpufeed.data.pack.sources", "pack"),
    "PackResult": ("gpufeed.data.pack.result", "PackResult"),
    "open_packed": ("gpufeed.data.format.reader", "open_packed"),
    "PackedDataset": ("gpufeed.data.format.reader", "PackedDataset"),
    "train": ("gpufeed.train.loop", "train"),
    "TrainConfig": ("gpufeed.train.config", "TrainConfig"),
    "TrainResult": ("gpufeed.train.events", "TrainResult"),
    "probe_machine": ("gpufeed.hardware.probe", "probe_machine"),
    "watch": ("gpufeed.doctor.wrapper", "watch"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpufeed' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "DeviceUnavailable",
    "FormatError",
    "GpufeedError",
    "RunFailed",
    "StagingError",
    "__version__",
    *_LAZY,
]
