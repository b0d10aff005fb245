"""What the doctor runs and how it watches it: typed values, apart from any command line (the CLI parses its flags
into these; the library never reads an argparse namespace)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Script:
    """A training script (or, with `is_module`, a module run as `python -m`) and its own arguments."""

    target: str
    args: tuple[str, ...] = ()
    is_module: bool = False

    @classmethod
    def from_words(cls, words: list[str], is_module: bool = False) -> Script:
        """SCRIPT ARGS... as a command line gives them (the first word the target)."""
        return cls(words[0], tuple(words[1:]), is_module)

    def words(self) -> list[str]:
        """The script as a command line's words after `python`/`gpufeed doctor`: [-m] TARGET ARGS..."""
        return [*(["-m"] if self.is_module else []), self.target, *self.args]

    def named(self) -> str:
        return " ".join(self.words())


@dataclass(frozen=True)
class WatchSettings:
    """How a run is watched: `warmup` steps let pass, then `steps` watched, then `profile_steps` under
    torch.profiler; the script is stopped when no step ends for `timeout_s` seconds."""

    steps: int = 50
    warmup: int = 5
    profile_steps: int = 5
    timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.warmup < 0 or self.profile_steps < 0 or not self.timeout_s > 0:
            raise ValueError(f"watch settings out of range: {self} (steps >= 1, warmup >= 0, profile_steps >= 0, "
                             f"timeout_s > 0)")


DEFAULT_SETTINGS = WatchSettings()  # `gpufeed doctor`'s defaults
