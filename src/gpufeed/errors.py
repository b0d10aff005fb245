"""The errors the library raises. Each message names what was wrong and the fix.

The command line maps `GpufeedError` to exit status 2 (the input was wrong) and `RunFailed` to 1
(the work itself failed); anything else is a bug and is shown as one.
"""

from __future__ import annotations


class GpufeedError(Exception):
    """Wrong input: a file, a flag or a value. The message is one line and says what to do."""

    exit_status = 2


class FormatError(GpufeedError):
    """A packed dataset file is missing, foreign, truncated, of another version, or fails its checksum."""


class ConfigError(GpufeedError, ValueError):
    """An argument has a value the library cannot use (batch size, augment name, device...)."""


class DeviceUnavailable(GpufeedError):
    """The requested device is not present on this machine."""


class RunFailed(GpufeedError):
    """The input was fine but the work failed (NaN loss, a full disk, a crashed staging thread)."""

    exit_status = 1


class StagingError(RunFailed):
    """A staging thread failed while preparing a batch; the message names the batch index."""
