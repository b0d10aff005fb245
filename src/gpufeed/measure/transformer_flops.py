"""The training FLOPs of a dense transformer per token, by the rule the field reports model FLOPs utilisation with
(PaLM, Chowdhery et al. 2022, appendix B): 6N + 12·L·h·s.

- 6N: each of the N parameters a token multiplies costs 2 FLOPs in the forward (a multiply-add) and 4 in the
  backward (the gradients of the input and of the weight). N leaves out an input embedding table, which is looked
  up, not multiplied; an output layer tied to it multiplies, and counts (torchtitan and nanoGPT count the same).
- A frozen parameter (a LoRA base) takes no weight gradient: 4 FLOPs, not 6, so with N_t of the N trained the
  rule reads 4N + 2N_t + 12·L·h·s, which is 6N + 12·L·h·s when everything trains.
- 12·L·h·s: attention's two products per layer (scores Q·Kᵀ and their weighted sum of V), 2·h·s FLOPs each per
  token forward, three times that with the backward, over L layers of width h = heads × head size, at sequence
  length s; the causal mask's skipped half is counted, as PaLM does.
Both the plan (tokens per second on a GPU) and the doctor (a training's MFU) read it: one rule, one place.
"""

from __future__ import annotations


def training_flops_per_token(multiplied_parameters: int, layers: int, attention_width: int,
                             sequence_length: int, trained_parameters: int | None = None) -> int:
    """6N + 12·L·h·s (the module's docstring): N the parameters a token multiplies, L the layers with attention, h
    their attention width (heads × head size), s the sequence length; with `trained_parameters` N_t of them
    trained (None: all), 4N + 2N_t + 12·L·h·s. Encoder-decoder models: count each stack's layers."""
    trained = multiplied_parameters if trained_parameters is None else trained_parameters
    for name, value in (("parameters", multiplied_parameters), ("layers", layers),
                        ("attention width", attention_width), ("sequence length", sequence_length),
                        ("trained parameters", trained)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if trained > multiplied_parameters:
        raise ValueError(f"trained parameters ({trained}) cannot exceed the parameters multiplied "
                         f"({multiplied_parameters})")
    return 4 * multiplied_parameters + 2 * trained + 12 * layers * attention_width * sequence_length


def training_flops_per_step(multiplied_parameters: int, layers: int, attention_width: int, sequence_length: int,
                            sequences: int) -> int:
    """`training_flops_per_token` times the tokens of `sequences` sequences of `sequence_length`."""
    if not isinstance(sequences, int) or sequences < 0:
        raise ValueError(f"sequences must be a non-negative int, got {sequences!r}")
    per_token = training_flops_per_token(multiplied_parameters, layers, attention_width, sequence_length)
    return per_token * sequence_length * sequences
