"""QLoRA's base: the linear layers' weights held as bitsandbytes holds them for `load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16` (Dettmers et al.
2023, QLoRA), derived from its layout, since bitsandbytes' 4-bit layers do not run on fake tensors:

- `Params4bit` after `quantize_4bit(blocksize=64, compress_statistics=True)`: the weight of n elements packed two
  to a byte, uint8 of ceil(n/2); one absmax per block of 64 elements, itself quantised to uint8 (double
  quantisation: ceil(n/64) bytes) with one float32 absmax per 256 of those blocks, a float32 offset and the 256-entry
  float32 map of the nested quantisation; and the 16-entry float32 NF4 code. So 0.5 + 1/64 + 4/(64 * 256) bytes a
  weight, 0.5159, plus 1,092 bytes a layer.
- `MatMul4Bit` (bitsandbytes/autograd/_functions.py): the forward dequantises the whole weight to the compute dtype
  (bf16), multiplies and drops it; it saves only the packed weight, not the input (the weight takes no gradient);
  the backward dequantises it again for the input's gradient. Both dequantised copies are transient.

Every nn.Linear but the output layer is quantised, as transformers does (`llm_int8_skip_modules` defaults to the
output embeddings); the embeddings stay in the frozen dtype. Float32 tables are held as int32 of the same bytes, so
that the trace's dtype casts leave them alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BLOCK = 64  # weights per absmax
NESTED_BLOCK = 256  # absmax values per nested (float32) absmax
NESTED_MAP = 256  # float32 entries of the nested quantisation's map
NF4_CODE = 16  # float32 entries of the NF4 code
COMPUTE_DTYPE = torch.bfloat16


def nf4_bytes(numel: int) -> int:
    """Bytes of one weight of `numel` elements held as NF4 with double quantisation (the module's docstring)."""
    blocks = -(-numel // BLOCK)
    return -(-numel // 2) + blocks + 4 * -(-blocks // NESTED_BLOCK) + 4 * (NESTED_MAP + 1 + NF4_CODE)


class _DequantizedMatmul(torch.autograd.Function):
    """bitsandbytes' MatMul4Bit's memory: the weight dequantised in the forward and again in the backward."""

    @staticmethod
    def forward(ctx, inputs, packed, bias, shape):
        ctx.shape = shape
        weight = torch.empty(shape, dtype=inputs.dtype, device=inputs.device)  # dequantize_4bit's output
        return F.linear(inputs, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        weight = torch.empty(ctx.shape, dtype=grad_output.dtype, device=grad_output.device)
        return grad_output @ weight, None, None, None


class NF4Linear(nn.Linear):
    """A frozen nn.Linear whose weight is held as NF4 (the module's docstring); peft wraps it as any nn.Linear."""

    def __init__(self, linear: nn.Linear):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        numel = self.in_features * self.out_features
        blocks = -(-numel // BLOCK)
        device = linear.weight.device
        self.weight = nn.Parameter(torch.empty((-(-numel // 2), 1), dtype=torch.uint8, device=device),
                                   requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        self.register_buffer("absmax", torch.empty(blocks, dtype=torch.uint8, device=device))
        self.register_buffer("nested_absmax", torch.empty(-(-blocks // NESTED_BLOCK), dtype=torch.int32, device=device))
        self.register_buffer("tables", torch.empty(NESTED_MAP + 1 + NF4_CODE, dtype=torch.int32, device=device))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        dtype = inputs.dtype
        bias = None if self.bias is None else self.bias.to(COMPUTE_DTYPE)
        output = _DequantizedMatmul.apply(inputs.to(COMPUTE_DTYPE), self.weight, bias,
                                          (self.out_features, self.in_features))
        return output.to(dtype)


def parameter_elements(model: nn.Module) -> dict[int, int]:
    """Each parameter's elements by id, as a model card counts them: an NF4Linear's packed weight counts the
    weights it packs, not its bytes."""
    packed = {id(module.weight): module.in_features * module.out_features for module in model.modules()
              if isinstance(module, NF4Linear)}
    return {id(parameter): packed.get(id(parameter), parameter.numel()) for parameter in model.parameters()}


def quantize_base(model: nn.Module) -> int:
    """Every nn.Linear of `model` but its output layer replaced by an NF4Linear, in place; how many."""
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    targets = [(name, module) for name, module in model.named_modules()
               if type(module) is nn.Linear and module is not output]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, NF4Linear(module))
    return len(targets)
