"""Turn a device name from the user ('auto', 'cpu', 'cuda', 'cuda:1', 'mps') into a `torch.device` that exists, and
a device into the label results carry ('cpu', 'cuda:0')."""

from __future__ import annotations

import torch

from gpufeed.errors import DeviceUnavailable

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, mps"


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str | torch.device | None = "auto") -> torch.device:
    """'auto' picks the first CUDA GPU, then MPS, then the CPU. A device that is not here is an error."""
    if isinstance(name, torch.device):
        name = str(name)
    name = (name or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise DeviceUnavailable(f"unknown device {name!r}; choose one of {DEVICE_CHOICES}") from None
    if device.type == "cpu":
        return device
    if device.type == "cuda":
        if not torch.cuda.is_available():
            missing = (f"device {name!r} asked for, but this machine has no CUDA GPU that torch can use "
                       f"(torch {torch.__version__})")
            raise DeviceUnavailable(f'{missing}; pass device="cpu"', command_line=f"{missing}; use --device cpu")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise DeviceUnavailable(f"device {name!r} asked for, but only {torch.cuda.device_count()} CUDA GPU(s) "
                                    f"are visible; choose one of cuda:0..cuda:{torch.cuda.device_count() - 1}")
        return torch.device("cuda", index)
    if device.type == "mps":
        if not _mps_available():
            missing = "device 'mps' asked for, but MPS is not available here"
            raise DeviceUnavailable(f'{missing}; pass device="cpu"', command_line=f"{missing}; use --device cpu")
        return device
    raise DeviceUnavailable(f"device type {device.type!r} is not supported; choose one of {DEVICE_CHOICES}")


def device_label(device: torch.device | str) -> str:
    """"cpu", "cuda:0": the device string results carry (a bare "cuda" gets the current index)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return f"cuda:{torch.cuda.current_device()}"
    return str(device)
