"""The errors the library raises. Each message names what was wrong and the fix.

The command line maps `GpufeedError` to exit status 2 (the input was wrong) and `RunFailed` to 1
(the work itself failed); anything else is a bug and is shown as one.
"""

from __future__ import annotations


class GpufeedError(Exception):
    """Wrong input: a file, a flag or a value. The message is one line and says what to do, in the library's
    terms (`device="cpu"`); `command_line`, when given, says the same in the command line's (`--device cpu`),
    and the command line prints that one (`for_command_line`)."""

    exit_status = 2

    def __init__(self, message: str = "", *, command_line: str | None = None) -> None:
        super().__init__(message)
        self.command_line = command_line

    def for_command_line(self) -> str:
        return self.command_line or str(self)


class FormatError(GpufeedError):
    """A packed dataset file is missing, foreign, truncated, of another version, or fails its checksum."""


class ConfigError(GpufeedError, ValueError):
    """An argument has a value the library cannot use (batch size, augment name, device...)."""


class DeviceUnavailable(GpufeedError):
    """The requested device is not present on this machine."""


class RunFailed(GpufeedError):
    """The input was fine but the work failed (NaN loss, a full disk, a crashed staging thread)."""

    exit_status = 1


class Interrupted(GpufeedError):
    """The run was asked to stop (SIGINT or SIGTERM) and stopped cleanly after a step; exit status 130.

    signal_name: "SIGINT" or "SIGTERM". step, total_steps: where it stopped. checkpoint: the file written there,
    or None when the run had no output folder to write it in. out: that folder (None without one).
    """

    exit_status = 130

    def __init__(self, signal_name: str, step: int, total_steps: int, checkpoint: str | None,
                 out: str | None) -> None:
        saved = f"checkpoint {checkpoint}" if checkpoint else "nothing saved (the run had no output folder)"
        super().__init__(f"stopped by {signal_name} after step {step} of {total_steps}: {saved}")
        self.signal_name, self.step, self.total_steps = signal_name, step, total_steps
        self.checkpoint, self.out = checkpoint, out


class StagingError(RunFailed):
    """A staging thread failed while preparing a batch; the message names the batch index."""
