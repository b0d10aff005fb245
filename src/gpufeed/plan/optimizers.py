"""The optimizers a plan may name: `gpufeed train`'s (train/step.py: sgd, adam, adamw) and two that language-model
training uses, whose state the memory trace must hold as they hold it:

- adafactor: transformers' `Adafactor` as the Hugging Face Trainer makes it for `optim="adafactor"`
  (scale_parameter=False, relative_step=False, warmup_init=False, a given learning rate): a factored second moment,
  a row and a column vector per matrix, no first moment; traced as it runs.
- adamw-8bit: bitsandbytes' `AdamW8bit` (blockwise 8-bit state, Dettmers et al. 2022), whose kernels are not
  traceable here. Its state by its layout (bitsandbytes/optim/optimizer.py, `Optimizer2State.init_state`): a
  tensor of at least `min_8bit_size` (4096) elements keeps exp_avg and exp_avg_sq as uint8 of its shape, and one
  float32 absmax per block of 256 elements for each; a smaller one keeps both in float32; the two 256-entry
  float32 quantisation maps are shared by the optimizer. Its fused step updates in place: no temporaries.
"""

from __future__ import annotations

import torch

from gpufeed.errors import ConfigError
from gpufeed.train.step import OPTIMIZERS, make_optimizer

PLAN_OPTIMIZERS = (*OPTIMIZERS, "adafactor", "adamw-8bit")
EIGHT_BIT_BLOCK = 256  # elements per absmax in bitsandbytes' blockwise optimizer state
MIN_8BIT_SIZE = 4096  # bitsandbytes' default min_8bit_size: smaller tensors keep 32-bit state
QUANTISATION_MAP = 256  # float32 entries of each of the two maps (signed and unsigned dynamic)


def make_plan_optimizer(name: str, parameters, foreach: bool | None = None) -> torch.optim.Optimizer:
    """The optimizer `name` (PLAN_OPTIMIZERS) over `parameters`, as the module's docstring says each is made."""
    if name in OPTIMIZERS:
        return make_optimizer(name, parameters, foreach=foreach)
    if name == "adafactor":
        try:
            from transformers.optimization import Adafactor
        except ImportError:
            raise ConfigError("--optimizer adafactor is transformers' Adafactor: pip install 'gpufeed[lm]'") from None
        return Adafactor(parameters, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)
    if name == "adamw-8bit":
        return EightBitAdamWState(parameters)
    raise ConfigError(f"unknown optimizer {name!r}; choose one of {', '.join(PLAN_OPTIMIZERS)}")


def eight_bit_state_bytes(numel: int) -> int:
    """Bytes of bitsandbytes' AdamW8bit state for one tensor of `numel` elements (the shared maps apart)."""
    if numel < MIN_8BIT_SIZE:
        return 2 * 4 * numel
    blocks = -(-numel // EIGHT_BIT_BLOCK)
    return 2 * (numel + 4 * blocks)


class EightBitAdamWState(torch.optim.Optimizer):
    """bitsandbytes' AdamW8bit's state, made by its layout on the first step (the module's docstring); the step
    itself changes nothing (its kernel updates in place): a stand-in for the memory trace, never for training."""

    def __init__(self, parameters):
        super().__init__(parameters, {"lr": 1e-3})
        self.maps: tuple[torch.Tensor, torch.Tensor] | None = None

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for parameter in group["params"]:
                if parameter.grad is None or parameter in self.state and self.state[parameter]:
                    continue
                if self.maps is None:
                    self.maps = tuple(torch.empty(QUANTISATION_MAP, dtype=torch.float32, device=parameter.device)
                                      for _ in range(2))
                state = self.state[parameter]
                state["step"] = 0  # a Python int in bitsandbytes
                if parameter.numel() < MIN_8BIT_SIZE:
                    for name in ("state1", "state2"):
                        state[name] = torch.empty_like(parameter, dtype=torch.float32)
                    continue
                blocks = -(-parameter.numel() // EIGHT_BIT_BLOCK)
                for name in ("state1", "state2"):
                    state[name] = torch.empty_like(parameter, dtype=torch.uint8)
                for name in ("absmax1", "absmax2"):
                    state[name] = torch.empty(blocks, dtype=torch.float32, device=parameter.device)
                state["qmap1"], state["qmap2"] = self.maps
        return None
