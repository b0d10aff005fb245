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
Both the plan (tokens per second on a GPU) and the doctor (a training's FLOPs per token beside the ones it counts)
read it, and what it reads of a model: `multiplied_parameters` (N, N_t) and `attention_shape` (L and h from a
transformers config): one rule, one place. No torch import: a model is read through its own methods.
"""

from __future__ import annotations

from typing import Any


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


def multiplied_parameters(model: Any, trained: bool = False, elements: dict[int, int] | None = None) -> int:
    """The parameters a token multiplies (the module's docstring) of an nn.Module: all but an input embedding table
    that is not also the output layer (a lookup, whose gradient is a scatter, not a product; transformers'
    `get_input_embeddings` and `get_output_embeddings` name them, when the model has them); with `trained`, those
    of them that are trained. `elements` gives a parameter's elements by id where they are not its `numel()` (the
    plan's 4-bit weights count the weights they pack, not their bytes: plan/language/nf4.py `parameter_elements`)."""
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skipped = set()
    if embeddings is not None and (output is None or output.weight is not embeddings.weight):
        skipped.add(id(embeddings.weight))
    elements = elements or {}
    return sum(elements.get(id(parameter), parameter.numel()) for parameter in model.parameters()
               if id(parameter) not in skipped and (parameter.requires_grad or not trained))


def attention_shape(config: Any) -> tuple[int, int] | None:
    """(L, h) of the rule from a transformers config: L its layers (`num_hidden_layers`, `n_layer` or
    `num_layers`; an encoder-decoder's encoder layers plus twice its decoder's `num_decoder_layers`, the decoder
    attending over the sequence twice), h heads × head size (`num_attention_heads`, `n_head` or `num_heads`, times
    `head_dim` or `d_kv`), else the hidden width (`hidden_size`, `n_embd` or `d_model`); None when either is not
    in the config (or there is none)."""
    layers = _first(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _first(config, "num_attention_heads", "n_head", "num_heads")
    size = _first(config, "head_dim", "d_kv")
    width = heads * size if heads is not None and size is not None else _first(config, "hidden_size", "n_embd",
                                                                                 "d_model")
    if layers is None or width is None:
        return None
    if bool(getattr(config, "is_encoder_decoder", False)):
        layers += 2 * (_first(config, "num_decoder_layers") or layers)
    return layers, width


def _first(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
