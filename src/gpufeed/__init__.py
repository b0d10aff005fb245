"""gpufeed: keep the accelerator fed, and say with measurements what a training needs."""

from gpufeed.errors import ConfigError, DeviceUnavailable, FormatError, GpufeedError, RunFailed, StagingError

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DeviceUnavailable",
    "FormatError",
    "GpufeedError",
    "RunFailed",
    "StagingError",
    "__version__",
]
