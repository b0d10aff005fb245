"""A model with no data behind its weights: built on the meta device (`meta_model`), then, under
`FakeTensorMode`, given fake weights of a device, dtype and memory format (`fake_weights`). The planner traces
a training step of it (memory.py) and counts its FLOPs (compute.py) without allocating anything. A user's factory
comes from its file through `user_function`."""

from __future__ import annotations

import copy
import importlib.util
import itertools
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from gpufeed.errors import ConfigError


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())[:300]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def user_function(path: str, name: str, returns: str) -> Callable:
    """Function `name` of the user's file `path` (imported as a module of its own); ConfigError in one line when the
    file is missing or fails to import, or has no such function (`returns`: what it should return, for the fix)."""
    if not Path(path).is_file():
        raise ConfigError(f"model file {path} does not exist; give path/to/file.py:factory")
    module_spec = importlib.util.spec_from_file_location(f"gpufeed_user_model_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - the user's file: report it in one line
        raise ConfigError(f"{path} failed to import: {one_line(error)}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"{path} has no function {name!r}; define def {name}(): return {returns}")
    return function


def meta_model(model_or_factory: nn.Module | Callable[[], nn.Module]) -> nn.Module:
    """The model with parameters and buffers on the meta device: built there, or a copy of the module."""
    if isinstance(model_or_factory, nn.Module):
        memo: dict[int, torch.Tensor] = {}
        for tensor in itertools.chain(model_or_factory.parameters(), model_or_factory.buffers()):
            meta = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
            memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
        return copy.deepcopy(model_or_factory, memo)
    try:
        with torch.device("meta"):
            model = model_or_factory()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(f"the model factory raised {one_line(error)}; fix it, or pass an nn.Module") from error
    if not isinstance(model, nn.Module):
        raise ConfigError(f"the model factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def fake_weights(model: nn.Module, device: torch.device, dtype: torch.dtype, channels_last: bool,
                 frozen_dtype: torch.dtype | None = None) -> None:
    """Under FakeTensorMode: model.to(device, dtype, memory format), in place (nn.Module.to cannot swap fakes);
    floating parameters that are not trained in `frozen_dtype` when given (a LoRA base held in bf16). Tensors of
    other dtypes (token ids, 4-bit packed weights) keep theirs."""
    made: dict[int, torch.Tensor] = {}  # tied weights stay tied
    for module in model.modules():
        for table, is_parameter in ((module._parameters, True), (module._buffers, False)):
            for name, old in [(name, old) for name, old in table.items() if old is not None]:
                if id(old) not in made:
                    frozen = is_parameter and not old.requires_grad and frozen_dtype is not None
                    kind = (frozen_dtype if frozen else dtype) if old.is_floating_point() else old.dtype
                    if channels_last and old.dim() == 4:
                        new = torch.empty(old.shape, dtype=kind, device=device, memory_format=torch.channels_last)
                    else:
                        new = torch.empty_strided(old.shape, old.stride(), dtype=kind, device=device)
                    made[id(old)] = nn.Parameter(new, old.requires_grad) if is_parameter else new
                table[name] = made[id(old)]
