"""Language models for the planner: `--model` resolved to a transformers configuration, built on the meta device
with transformers' own modeling code, the fine-tuning method applied (LoRA through peft, QLoRA's 4-bit base,
activation checkpointing through the model's own switch). Nothing is downloaded and nothing real is allocated.

Resolution (`resolve_language_model`), after `gpufeed train`'s image models: the catalog's names
(models.json: configuration facts with a source each), an existing path (a `config.json`, a folder
holding one, or `file.py:factory`, a function returning any module that takes token ids), then a model id
looked up in the local Hugging Face cache only. A configuration whose model type transformers does not ship
(it would need `trust_remote_code`) is refused. Attention is traced as transformers' "sdpa" implementation (memory
linear in the sequence); a model without it falls back to "eager" (the scores, quadratic in the sequence), and
says so.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpufeed.errors import ConfigError
from gpufeed.plan.fake_model import one_line, user_function

LM_EXTRA = "pip install 'gpufeed[lm]'"
METHODS = ("full", "lora", "qlora")
ATTENTION = "sdpa"


@dataclass(frozen=True)
class CatalogModel:
    """One architecture of models.json: its name, the model id and page its facts come from, the parameter
    count its model card publishes, and the configuration (transformers' field names, `model_type` included)."""

    name: str
    hf_id: str
    source: str
    parameters: int
    config: dict


def language_catalog() -> list[CatalogModel]:
    document = json.loads(resources.files("gpufeed.plan.language").joinpath("models.json").read_text("utf-8"))
    return [CatalogModel(entry["name"], entry["hf_id"], entry["source"], entry["parameters"], entry["config"])
            for entry in document["models"]]


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ConfigError(f"planning a language model needs transformers and peft: {LM_EXTRA}") from None
    return transformers


@contextlib.contextmanager
def transformers_quiet():
    """transformers' log set to errors only, then put back: its advice on its own training (GPT-2's "`loss_type=None`
    was set in the config but it is unrecognized. Using the default loss") would print above the plan, about a model
    the plan built from a config to trace. Used as a decorator on the plan's and the check's entry points."""
    try:
        from transformers.utils import logging
    except ImportError:
        yield
        return
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


@dataclass(frozen=True)
class FineTune:
    """How the model is trained: `method` full | lora | qlora; LoRA's rank, alpha and target modules (None: peft's
    default for the model type); activation checkpointing (the model's own `gradient_checkpointing_enable`)."""

    method: str = "full"
    lora_rank: int = 16
    lora_alpha: int | None = None  # None: twice the rank
    lora_targets: tuple[str, ...] | None = None
    checkpointing: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.lora_rank <= 0 or (self.lora_alpha is not None and self.lora_alpha <= 0):
            raise ConfigError(f"--lora-rank and --lora-alpha must be positive, got {self.lora_rank} and "
                              f"{self.lora_alpha}")
        if self.method == "full" and (self.lora_targets or self.lora_alpha is not None):
            raise ConfigError("--lora-targets and --lora-alpha go with --method lora or qlora")

    @property
    def alpha(self) -> int:
        return 2 * self.lora_rank if self.lora_alpha is None else self.lora_alpha


@dataclass(frozen=True)
class LanguageModel:
    """A language model to plan: `name` as asked, `source` (where its configuration came from, in words), and either
    a transformers `config` or a user's `factory`. `max_positions`: the longest sequence its positions allow (None:
    not known). `untie_output`: the checkpoint keeps its output layer apart from the input embeddings though the
    installed transformers ties them (T5 v1.1, Flan-T5)."""

    name: str
    source: str
    config: Any = None
    factory: Callable[[], nn.Module] | None = None
    max_positions: int | None = None
    untie_output: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def model_type(self) -> str:
        return getattr(self.config, "model_type", "custom") if self.config is not None else "custom"

    @property
    def seq2seq(self) -> bool:
        return bool(getattr(self.config, "is_encoder_decoder", False))

    @property
    def layers(self) -> int | None:
        return _first(self.config, "num_hidden_layers", "n_layer", "num_layers")


def _first(config, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def _config_from_dict(values: dict, where: str):
    transformers = _transformers()
    values = dict(values)
    model_type = values.pop("model_type", None)
    if not model_type:
        raise ConfigError(f"{where} has no model_type; give a transformers config.json (it names the architecture)")
    if model_type not in transformers.CONFIG_MAPPING:
        remote = " (its auto_map needs trust_remote_code, which gpufeed never runs)" if "auto_map" in values else ""
        raise ConfigError(f"{where}: model_type {model_type!r} is not one transformers {transformers.__version__} "
                          f"ships{remote}; give a config of a supported architecture or a file.py:factory")
    values.pop("auto_map", None)
    values.pop("transformers_version", None)
    values.pop("torch_dtype", None)
    values.pop("dtype", None)
    values.pop("quantization_config", None)
    try:
        return transformers.CONFIG_MAPPING[model_type](**values)
    except Exception as error:  # noqa: BLE001 - the user's config: one line
        raise ConfigError(f"{where}: transformers cannot read it as a {model_type} config: {one_line(error)}") from None


def _config_file(path: Path):
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {path} as JSON: {one_line(error)}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path} is not a JSON object; give a transformers config.json")
    return _config_from_dict(values, str(path))


def _positions(config) -> int | None:
    if getattr(config, "model_type", None) == "t5":
        return None  # relative position buckets: no fixed limit
    return _first(config, "max_position_embeddings", "n_positions")


def _from_config(name: str, config, source: str, untie: bool = False) -> LanguageModel:
    return LanguageModel(name, source, config, max_positions=_positions(config), untie_output=untie)


def _factory(spec: str) -> LanguageModel:
    path, _, function = spec.rpartition(":")
    factory = user_function(path, function, "a module that takes token ids")
    if inspect.signature(factory).parameters:
        raise ConfigError(f"{path}: {function}() must take no arguments; define def {function}(): return a module "
                          f"that takes token ids")
    return LanguageModel(spec, f"the factory {spec}", factory=factory)


def resolve_language_model(spec: str) -> LanguageModel:
    """`spec` as a language model (the module's docstring gives the order); ConfigError when it is none."""
    for entry in language_catalog():
        if spec == entry.name:
            config = _config_from_dict(entry.config, f"the catalog's {entry.name}")
            return _from_config(entry.name, config, f"the catalog: {entry.hf_id} ({entry.source})",
                                untie=entry.config.get("tie_word_embeddings") is False)
    path, _, function = spec.rpartition(":")
    if path and function and path.endswith(".py"):
        return _factory(spec)
    candidate = Path(spec)
    if candidate.is_dir():
        if not (candidate / "config.json").is_file():
            raise ConfigError(f"{spec} is a folder without a config.json; give a model's folder or its config.json")
        candidate = candidate / "config.json"
    if candidate.is_file():
        return _from_config(spec, _config_file(candidate), f"{candidate}")
    if spec.count("/") == 1 and not spec.startswith((".", "/")):
        _transformers()
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(spec, "config.json")
        if isinstance(cached, str):
            return _from_config(spec, _config_file(Path(cached)), f"the local Hugging Face cache: {cached}")
        raise ConfigError(f"{spec} is not in the local Hugging Face cache (gpufeed never downloads); give its "
                          f"config.json, or a catalog name (gpufeed plan --list-models)")
    names = ", ".join(entry.name for entry in language_catalog()[:4])
    raise ConfigError(f"unknown model {spec!r}: not one of gpufeed train's models, the catalog's ({names}, ...: "
                      f"gpufeed plan --list-models), a config.json, a folder, a file.py:factory or a cached model id")


@contextlib.contextmanager
def rows_as_read():
    """Within it, transformers treats each row of token ids as one unpadded sequence, as it decides on real ids:
    its check for sequences packed into a row reads the position ids, which fake tensors do not have, so on them it
    would build a causal mask (quadratic in the sequence) that a real step without padding never holds. Patched
    only where transformers 5 has the check (masking_utils.find_packed_sequence_indices); restored on leaving."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    original = getattr(masking_utils, "find_packed_sequence_indices", None)
    if original is None:
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original


def _lora(model: nn.Module, language_model: LanguageModel, tune: FineTune) -> nn.Module:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError(f"--method {tune.method} needs peft: {LM_EXTRA}") from None
    task = "SEQ_2_SEQ_LM" if language_model.seq2seq else "CAUSAL_LM"
    targets = list(tune.lora_targets) if tune.lora_targets else None
    try:
        with warnings.catch_warnings():  # peft 0.21 reads transformers 5's deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, LoraConfig(r=tune.lora_rank, lora_alpha=tune.alpha, target_modules=targets,
                                                    task_type=task))
    except ValueError as error:
        if targets is None:
            raise ConfigError(f"peft has no default LoRA targets for model type {language_model.model_type!r}: "
                              f"name them with --lora-targets (e.g. q_proj,v_proj)") from None
        raise ConfigError(f"--lora-targets {','.join(targets)}: {one_line(error)}") from None


def build_language_model(language_model: LanguageModel, tune: FineTune) -> tuple[nn.Module, tuple[str, ...]]:
    """The model on the meta device with `tune` applied, and notes on how it was built."""
    notes: list[str] = []
    with torch.device("meta"):
        if language_model.factory is not None:
            try:
                model = language_model.factory()
            except Exception as error:  # noqa: BLE001
                raise ConfigError(f"{language_model.name} raised {one_line(error)}") from None
            if not isinstance(model, nn.Module):
                raise ConfigError(f"{language_model.name} returned {type(model).__name__}, not a torch.nn.Module")
        else:
            model = _from_transformers(language_model, notes)
        if tune.checkpointing:
            notes.append(_enable_checkpointing(model, language_model.name))
        if tune.method == "qlora":
            from gpufeed.plan.language.nf4 import quantize_base

            count = quantize_base(model)
            if not count:
                raise ConfigError(f"--method qlora quantises nn.Linear layers, and {language_model.name} has none "
                                  f"(GPT-2's are Conv1D): plan it with --method lora")
            notes.append(f"QLoRA: {count} linear layers' weights held as 4-bit NF4 with double quantisation "
                         f"(plan/language/nf4.py); the output layer and the embeddings stay in the frozen dtype")
        if tune.method in ("lora", "qlora"):
            model = _lora(model, language_model, tune)
            config = model.peft_config["default"]
            notes.append(f"LoRA through peft: rank {config.r}, alpha {config.lora_alpha}, targets "
                         f"{', '.join(sorted(config.target_modules))}")
    return model, tuple(notes)


def _enable_checkpointing(model: nn.Module, name: str) -> str:
    """The model's own activation checkpointing switched on, non-reentrant; a note saying which switch."""
    for switch, keyword in (("activation_checkpointing_enable", "activation_checkpointing_kwargs"),  # transformers 5
                            ("gradient_checkpointing_enable", "gradient_checkpointing_kwargs")):  # 4.x
        enable = getattr(model, switch, None)
        if enable is not None:
            enable(**{keyword: {"use_reentrant": False}})
            return (f"activation checkpointing: transformers' {switch}(use_reentrant=False): each layer's input "
                    f"kept, its inside recomputed in the backward")
    raise ConfigError(f"{name} has no activation_checkpointing_enable() or gradient_checkpointing_enable(): "
                      f"checkpointing is planned through the model's own switch (a transformers model)")


def _from_transformers(language_model: LanguageModel, notes: list[str]) -> nn.Module:
    transformers = _transformers()
    auto = transformers.AutoModelForSeq2SeqLM if language_model.seq2seq else transformers.AutoModelForCausalLM
    config = language_model.config
    config.use_cache = False  # training: no key-value cache
    try:
        model = auto.from_config(config, attn_implementation=ATTENTION)
        notes.append(f"attention: transformers' {ATTENTION}, which CUDA runs as a fused kernel that holds no scores "
                     f"(planned so, with dropout too); each row one unpadded sequence, so no mask (a padded "
                     f"batch's mask is not planned)")
    except (ValueError, ImportError):
        model = auto.from_config(config, attn_implementation="eager")
        notes.append(f"attention: transformers' eager ({type(model).__name__} has no {ATTENTION}): the scores are "
                     f"held, memory quadratic in the sequence")
    output, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    if language_model.untie_output and output is not None and output.weight is embeddings.weight:
        output.weight = nn.Parameter(torch.empty_like(output.weight))
        notes.append("the output layer kept apart from the input embeddings, as the checkpoint holds it (the "
                     f"installed transformers {transformers.__version__} ties them)")
    return model
