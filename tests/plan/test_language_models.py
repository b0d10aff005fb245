"""The planner for language models (plan/language/model.py, run.py, memory.py's token path): the catalog
against the parameter counts its sources publish, exact bytes of a small Llama worked out by hand for full and LoRA
training, the 6N + 12·L·h·s rule by hand, the what-fits search against a brute force on hand-made curves, the
traced peak against the CPU allocator in a real training step, and bad input as one line with exit status 2."""

from __future__ import annotations

import json
import random
from html import escape

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from transformers import GPT2Config, LlamaConfig, T5Config  # noqa: E402

from gpufeed.cli.main import main  # noqa: E402
from gpufeed.measure.transformer_flops import multiplied_parameters, training_flops_per_token  # noqa: E402
from gpufeed.plan.language.model import (  # noqa: E402
    FineTune,
    LanguageModel,
    build_language_model,
    language_catalog,
    resolve_language_model,
    transformers_quiet,
)
from gpufeed.plan.language.nf4 import nf4_bytes  # noqa: E402
from gpufeed.plan.language.run import (  # noqa: E402
    LanguagePlanRequest,
    make_language_plan,
    plan_flops_per_token,
)
from gpufeed.plan.memory import estimate_language_memory, fits_by_capacity  # noqa: E402
from gpufeed.plan.optimizers import eight_bit_state_bytes  # noqa: E402

# hidden 64, MLP 128, 2 layers, 4 query heads and 2 key-value heads of 16, vocabulary 1,000, untied output
TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
# per layer: q 64x64, k and v 64x32, o 64x64, gate, up and down 64x128, two norms of 64
LAYER = 4096 + 2048 + 2048 + 4096 + 3 * 8192 + 2 * 64  # 36,992
PARAMETERS = 1000 * 64 + 2 * LAYER + 64 + 1000 * 64  # embeddings, layers, final norm, output: 202,048
TENSORS = 1 + 2 * 9 + 1 + 1  # parameter tensors: 21
BUFFER_ELEMENTS = 16  # the rotary embedding's inv_freq and original_inv_freq, 8 each (head size 16 / 2)
# LoRA at rank 16 on q_proj and v_proj (peft's default for llama): A (16 x 64) and B (64 x 16) on q, A (16 x 64)
# and B (32 x 16) on v
LORA = 2 * ((16 * 64 + 64 * 16) + (16 * 64 + 32 * 16))  # 7,168 in 8 tensors


def tiny(name: str = "tiny") -> LanguageModel:
    return LanguageModel(name, "the test", LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"}),
                         max_positions=256)


def factory(model: LanguageModel, tune: FineTune):
    return lambda: build_language_model(model, tune)[0]


@pytest.mark.parametrize("entry", language_catalog(), ids=lambda entry: entry.name)
def test_each_catalog_model_builds_on_meta_with_the_parameters_its_model_card_publishes(entry):
    model = resolve_language_model(entry.name)
    built, _ = build_language_model(model, FineTune())
    assert all(parameter.device.type == "meta" for parameter in built.parameters())
    assert sum(parameter.numel() for parameter in built.parameters()) == entry.parameters
    assert entry.source.startswith("https://huggingface.co/" + entry.hf_id)


def test_full_training_bytes_are_the_hand_derived_ones():
    from transformers import masking_utils

    check = masking_utils.find_packed_sequence_indices
    estimate = estimate_language_memory(factory(tiny(), FineTune()), 64, 2, "adamw", "fp32", "cpu")
    assert masking_utils.find_packed_sequence_indices is check  # rows_as_read puts transformers back
    assert estimate.parameters == estimate.trainable_parameters == PARAMETERS == 202_048
    assert estimate.weights_bytes == 4 * PARAMETERS + 4 * BUFFER_ELEMENTS
    assert estimate.trainable_weights_bytes == 4 * PARAMETERS and estimate.frozen_weights_bytes == 4 * BUFFER_ELEMENTS
    assert estimate.gradients_bytes == 4 * PARAMETERS
    assert estimate.optimizer_bytes == 2 * 4 * PARAMETERS + 4 * TENSORS  # exp_avg, exp_avg_sq, a step each
    assert estimate.sequence_length == 64
    assert sum(estimate.peak_parts.values()) == estimate.peak_bytes


def test_bf16_true_holds_weights_gradients_and_optimizer_state_in_two_bytes():
    estimate = estimate_language_memory(factory(tiny(), FineTune()), 64, 2, "adamw", "bf16-true", "cpu")
    assert estimate.weights_bytes == 2 * PARAMETERS + 2 * BUFFER_ELEMENTS
    assert estimate.gradients_bytes == 2 * PARAMETERS
    assert estimate.optimizer_bytes == 2 * 2 * PARAMETERS + 4 * TENSORS  # the step counters stay float32


def test_lora_trains_only_its_adapters_and_the_frozen_base_is_held_in_its_dtype():
    estimate = estimate_language_memory(factory(tiny(), FineTune("lora")), 64, 2, "adamw", "bf16", "cpu",
                                        frozen_dtype=torch.bfloat16)
    assert estimate.parameters == PARAMETERS + LORA and estimate.trainable_parameters == LORA == 7_168
    assert estimate.trainable_weights_bytes == 4 * LORA  # the adapters in fp32 under bf16 autocast
    assert estimate.frozen_weights_bytes == 2 * PARAMETERS + 4 * BUFFER_ELEMENTS
    assert estimate.gradients_bytes == 4 * LORA
    assert estimate.optimizer_bytes == 2 * 4 * LORA + 4 * 8


def test_qlora_holds_the_base_linears_as_nf4_by_the_layout_and_the_rest_in_the_frozen_dtype():
    estimate = estimate_language_memory(factory(tiny(), FineTune("qlora")), 64, 2, "adamw", "bf16", "cpu",
                                        frozen_dtype=torch.bfloat16)
    # NF4: half a byte a weight, a uint8 absmax per 64, a float32 one per 256 of those, 1,092 bytes of tables
    assert nf4_bytes(4096) == 2048 + 64 + 4 + 1092 and nf4_bytes(8192) == 4096 + 128 + 4 + 1092
    linears = 2 * (2 * nf4_bytes(4096) + 2 * nf4_bytes(2048) + 3 * nf4_bytes(8192))
    bf16 = 2 * (1000 * 64 + 2 * 2 * 64 + 64 + 1000 * 64)  # embeddings, norms, output layer
    assert estimate.frozen_weights_bytes == linears + bf16 + 4 * BUFFER_ELEMENTS
    assert estimate.trainable_parameters == LORA


def test_adamw_8bit_state_is_bitsandbytes_layout():
    assert eight_bit_state_bytes(4095) == 2 * 4 * 4095  # under min_8bit_size: two float32 states
    assert eight_bit_state_bytes(8192) == 2 * (8192 + 4 * 32)  # two uint8 states and a float32 absmax per 256
    estimate = estimate_language_memory(factory(tiny(), FineTune()), 64, 2, "adamw-8bit", "fp32", "cpu")
    sizes = [1000 * 64] * 2 + [4096, 2048, 2048, 4096, 8192, 8192, 8192, 64, 64] * 2 + [64]
    assert estimate.optimizer_bytes == sum(eight_bit_state_bytes(size) for size in sizes) + 2 * 256 * 4


def test_flops_per_token_is_6n_plus_12_l_h_s_with_the_input_embeddings_left_out():
    model = build_language_model(tiny(), FineTune())[0]
    multiplied = PARAMETERS - 1000 * 64  # the untied output layer multiplies; the input table is looked up
    assert multiplied_parameters(model) == multiplied
    assert training_flops_per_token(multiplied, 2, 64, 128) == 6 * 138_048 + 12 * 2 * 64 * 128 == 1_024_896
    with pytest.raises(ValueError, match="layers"):
        training_flops_per_token(1, -1, 64, 128)
    # LoRA: the base takes no weight gradient (4 FLOPs a frozen parameter), the adapters 6
    lora = build_language_model(tiny(), FineTune("lora"))[0]
    assert multiplied_parameters(lora) == multiplied + LORA
    assert training_flops_per_token(multiplied + LORA, 2, 64, 128, LORA) == \
        4 * (138_048 + 7_168) + 2 * 7_168 + 196_608 == 791_808
    assert multiplied_parameters(model, trained=True) == multiplied and \
        multiplied_parameters(lora, trained=True) == LORA


@pytest.mark.parametrize("method, flops", [("full", 1_024_896), ("lora", 791_808)])
def test_the_plan_says_the_flops_worked_out_by_hand(tmp_path, method, flops):
    """A full fine-tune trains the input table too, but looks it up: its gradient is no product (the plan of an
    untied model once failed here, counting it among the trained parameters multiplied)."""
    model = tiny()
    assert plan_flops_per_token(build_language_model(model, FineTune(method))[0], model, 128) == flops


@pytest.mark.parametrize("seed", range(40))
def test_what_fits_equals_a_brute_force_search_on_hand_made_curves(seed):
    """Convex curves (affine, quadratic, with a kink where another moment starts to peak), with and without a
    limit and a step: every capacity's answer equals the brute force's."""
    draw = random.Random(seed)
    a, b, c = draw.randint(100, 10_000), draw.randint(1, 500), draw.choice([0, 0, draw.randint(0, 5)])
    kink, extra = draw.randint(1, 400), draw.randint(0, 300)

    def curve(n: int) -> int:
        return a + b * n + c * n * n + (extra * (n - kink) if n > kink else 0)

    step, limit = draw.choice([1, 1, 8, 128]), draw.choice([None, draw.randint(1, 40_000)])
    capacities = [draw.randint(50, 3_000_000) for _ in range(10)]
    found = fits_by_capacity(curve, capacities, limit, step)
    for capacity in capacities:
        expected, n = 0, step
        while (limit is None or n <= limit) and curve(n) <= capacity:
            expected, n = n, n + step
        assert found[capacity] == expected, (capacity, found[capacity], expected)


def test_a_peak_that_is_a_line_answers_every_capacity_from_three_traces():
    """peak(n) = 5,000 + 700 n: traced at 1, 2 and one past the largest capacity's answer, the rest read off the
    line (convexity makes it exact); the answers are the brute force's."""
    traced = []

    def line(n: int) -> int:
        traced.append(n)
        return 5_000 + 700 * n

    capacities = [4_000, 5_700, 6_399, 6_400, 100_000, 2_000_000]
    assert fits_by_capacity(line, capacities) == {4_000: 0, 5_700: 1, 6_399: 1, 6_400: 2, 100_000: 135,
                                                  2_000_000: 2_850}
    assert sorted(traced) == [1, 2, 2_851]


def _allocator_peak(model: LanguageModel, tune: FineTune, precision: str, frozen, optimizer: str) -> int:
    """The CPU allocator's live total at its largest in steps 2 and 3 of the real step (plan --check's path:
    plan/language/check.py builds the model as the plan builds it, with real weights in the plan's dtypes)."""
    from gpufeed.plan.check import STEP_MARK, profiled_cpu_peak
    from gpufeed.plan.language.check import real_language_model, run_language_steps

    def run() -> None:
        built = real_language_model(model, tune, precision, frozen, torch.device("cpu"))
        run_language_steps(built, optimizer, precision, torch.device("cpu"), 2, 64, 1, 3)

    return profiled_cpu_peak(run, {STEP_MARK.format(1), STEP_MARK.format(2)})


SMALL = {"llama": tiny,  # untied output; GPT-2 ties its output to the embeddings, T5 ties three uses of one table
         "gpt2": lambda: LanguageModel("gpt2", "the test", GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                                                    vocab_size=1000)),
         "t5": lambda: LanguageModel("t5", "the test", T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2,
                                                              num_heads=4, vocab_size=1000, decoder_start_token_id=0,
                                                              pad_token_id=0))}


CASES = {"full": (FineTune(), "fp32", None, "adamw"), "lora": (FineTune("lora"), "fp32", None, "adamw"),
         "checkpointing": (FineTune(checkpointing=True), "fp32", None, "adamw"),
         "bf16-true": (FineTune(), "bf16-true", None, "adamw"),
         "lora-bf16": (FineTune("lora"), "bf16", torch.bfloat16, "adamw"),
         "fp16": (FineTune(), "fp16", None, "adamw"), "adafactor": (FineTune(), "fp32", None, "adafactor"),
         "sgd": (FineTune(), "fp32", None, "sgd")}
# every case on the Llama; on GPT-2 and T5 (tied embeddings, other attention) the full step, checkpointing and LoRA
# under bf16. bf16 and fp16 cases carry the isa mark (their kernels' scratch differs by instruction set); fp16 runs
# with its gradient scaler, which the trace leaves out (its step reads a value).
ALLOCATOR_CASES = [pytest.param(architecture, case, marks=[pytest.mark.isa] if "16" in case else [],
                                id=f"{architecture}-{case}")
                   for architecture, cases in (("llama", CASES), ("gpt2", ("full", "checkpointing", "lora-bf16")),
                                               ("t5", ("full", "checkpointing", "lora-bf16")))
                   for case in cases]


@pytest.mark.parametrize("architecture, case", ALLOCATOR_CASES)
def test_traced_peak_of_small_transformers_is_within_1_percent_of_the_allocator(architecture, case):
    """Stricter than the issue's 5%, on the CPU allocator's own events in a real step. Measured 2026-12-03: all
    within 0.34% (checkpointed T5 the farthest), the trace 1 KB above in the others (the optimizer's scalar
    tensors); the Llama under fp16 with its scaler, Adafactor and SGD 0.02-0.03% above. Before the trace read each
    row as one unpadded sequence (language_model.rows_as_read), the Llama's was 2-4% above: on fake tensors
    transformers built the causal mask it skips on real ids."""
    tune, precision, frozen, optimizer = CASES[case]
    model = SMALL[architecture]()
    estimate = estimate_language_memory(factory(model, tune), 64, 2, optimizer, precision, "cpu", frozen_dtype=frozen)
    measured = _allocator_peak(model, tune, precision, frozen, optimizer)
    assert abs(measured - estimate.peak_bytes) <= 0.01 * estimate.peak_bytes, (estimate.peak_bytes, measured)


def test_the_plan_of_a_small_config_fits_each_gpu_and_says_how(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    page = tmp_path / "plan.html"
    assert main(["plan", "--model", str(tmp_path), "--seq-len", "128", "--method", "qlora", "--json", "-", "--html",
                 str(page)]) == 0  # the base's 4-bit weights counted as the weights they pack, not their bytes
    document = json.loads(capsys.readouterr().out)
    html = page.read_text()  # the page of report/language_plan_page.py, from the same document
    assert "What fits, how fast, what it costs: one GPU" in html
    assert f"{PARAMETERS:,} frozen and {LORA:,} of LoRA trained" in html
    assert all(gpu["name"] in html for gpu in document["gpus"])
    assert document["kind"] == "language_model" and document["sequence_length"] == 128
    assert document["params"] == PARAMETERS + LORA and document["trainable_params"] == LORA
    memory = document["memory"]
    assert sum(memory["peak_parts"].values()) == memory["peak_bytes"]
    for gpu in document["gpus"]:  # the tiny model fits everywhere, up to its 256 positions
        assert gpu["fits"] and gpu["max_sequence_length"] == 256 and gpu["max_batch_size"] > 1000
        assert "max tokens: the model's 256 positions, not the memory" in gpu["notes"]


def test_transformers_warnings_are_held_back_while_the_plan_runs_the_model_and_the_level_put_back():
    """GPT-2's "`loss_type=None` was set in the config but it is unrecognized" printed above the plan: transformers'
    log is at errors only inside transformers_quiet (the plan's and the check's entry points), as the user set it
    after."""
    import logging

    from transformers.utils import logging as transformers_logging

    from gpufeed.plan.language.check import check_language_plan
    from gpufeed.plan.language.run import make_language_plan

    before = transformers_logging.get_verbosity()
    try:
        transformers_logging.set_verbosity_info()
        logger = transformers_logging.get_logger("transformers.modeling_utils")
        with transformers_quiet():
            assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
        assert transformers_logging.get_verbosity() == logging.INFO and logger.isEnabledFor(logging.INFO)
    finally:
        transformers_logging.set_verbosity(before)
    for entry in (make_language_plan, check_language_plan):  # contextmanager's decorator keeps the wrapped function
        assert entry.__wrapped__.__name__ == entry.__name__


def test_check_runs_the_planned_step_here_and_its_page_shows_it(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    page = tmp_path / "plan.html"
    assert main(["plan", "--model", str(tmp_path), "--seq-len", "128", "--method", "lora", "--check", "--json", "-",
                 "--html", str(page)]) == 0
    document = json.loads(capsys.readouterr().out)
    check = document["check"]
    assert document["flops_per_token"] == 4 * (138_048 + LORA) + 2 * LORA + 12 * 2 * 64 * 128 == 791_808
    assert check["device"] == "cpu" and check["measured_step_s"] > 0
    measured, predicted = check["measured_peak_bytes"], check["predicted_peak_bytes"]
    assert abs(predicted - measured) <= 0.01 * measured and check["error_fraction"] == (predicted - measured) / measured
    html = page.read_text()
    assert "Check against a measured step on cpu" in html and escape(check["lines"][0]) in html


@pytest.mark.parametrize("words, message", [(["--method", "qlora"], "QLoRA's 4-bit base is planned from"),
                                            (["--optimizer", "adamw-8bit"], "AdamW 8-bit's state is planned from")])
def test_check_refuses_what_is_planned_from_a_layout_before_planning(tmp_path, capsys, words, message):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert main(["plan", "--model", str(tmp_path), "--check", *words]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1


def test_check_refuses_a_step_larger_than_the_free_memory_before_allocating(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from gpufeed.plan.language import check as language_check

    (tmp_path / "config.json").write_text(json.dumps(TINY))
    plan = SimpleNamespace(request=LanguagePlanRequest(str(tmp_path), 64, 2), sequence_length=64)  # what it reads
    monkeypatch.setattr(language_check, "_free_bytes", lambda device: 2**20)  # 1 MiB free: the step needs 5
    monkeypatch.setattr(language_check, "real_language_model", lambda *args: pytest.fail("built the model"))
    with pytest.raises(Exception, match=r"--check would need \d MiB on cpu, 1 MiB is free here"):
        language_check.check_language_plan(plan)


def test_the_plan_refuses_a_sequence_longer_than_the_positions():
    with pytest.raises(Exception, match="longer than gpt2's 1,024 positions"):
        make_language_plan(LanguagePlanRequest("gpt2", 2048))


@pytest.mark.parametrize("config, words, message", [
    ({"hidden_size": 64}, [], "has no model_type"),
    ({"model_type": "mystery", "auto_map": {"AutoModel": "x.Y"}}, [], "trust_remote_code"),
    (TINY, ["--seq-len", "512"], "longer than"),
    (TINY, ["--method", "lora", "--lora-targets", "nothing_here"], "--lora-targets nothing_here"),
    (TINY, ["--input", "3x32x32"], "--input goes with image models"),
    (TINY, ["--lora-rank", "8"], "go with --method lora or qlora"),
])
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, capsys, config, words, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["plan", "--model", str(tmp_path / "config.json"), *words]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and len(error.splitlines()) == 1, error


def test_an_unknown_name_and_an_uncached_id_say_where_models_come_from(capsys):
    assert main(["plan", "--model", "no-such-model"]) == 2
    assert "gpufeed plan --list-models" in capsys.readouterr().err
    assert main(["plan", "--model", "nobody/no-such-model"]) == 2
    assert "not in the local Hugging Face cache (gpufeed never downloads)" in capsys.readouterr().err


def test_list_models_prints_every_catalog_entry(capsys):
    assert main(["plan", "--list-models", "--json", "-"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    assert [entry["name"] for entry in listed] == [entry.name for entry in language_catalog()]


@pytest.mark.slow
def test_planning_a_7b_model_allocates_none_of_it():
    """Mistral 7B's step traced in a fresh process: its peak RSS stays under 1.5 GiB, where its weights alone would
    take 13.5 GiB in bf16 (measured 2026-12-03: 0.41 GiB planning Llama 3.1 8B with LoRA)."""
    import subprocess
    import sys

    script = ("import resource, torch\n"
              "from gpufeed.plan.language.model import FineTune, build_language_model, resolve_language_model\n"
              "from gpufeed.plan.memory import estimate_language_memory\n"
              "model = resolve_language_model('mistral-7b')\n"
              "estimate = estimate_language_memory(lambda: build_language_model(model, FineTune())[0], 512, 1,\n"
              "                                    'adamw', 'bf16-true')\n"
              "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "print(estimate.parameters, estimate.weights_bytes, rss)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    parameters, weights, rss_kib = (int(word) for word in done.stdout.split()[-3:])
    assert parameters == 7_241_732_096 and weights >= 2 * parameters  # the plan saw the whole model in bf16
    assert rss_kib * 1024 < 1.5 * 2**30, rss_kib


def test_the_fused_attention_stand_in_saves_what_cudas_kernels_save():
    """Grouped-query shapes: 8 query heads over 2 key-value heads. Saved: the inputs, the output (B, heads, N, value
    size) in the inputs' dtype, the float32 log-sum-exp (B, heads, N) and the dropout seed and offset; no scores."""
    from gpufeed.plan.language.fused_attention import fused_attention

    query = torch.zeros(2, 8, 16, 32, dtype=torch.bfloat16, requires_grad=True)
    key, value = (torch.zeros(2, 2, 16, 32, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    original = torch.nn.functional.scaled_dot_product_attention
    with fused_attention():
        output = torch.nn.functional.scaled_dot_product_attention(query, key, value, dropout_p=0.1, enable_gqa=True)
    assert torch.nn.functional.scaled_dot_product_attention is original and output.shape == (2, 8, 16, 32)
    saved = output.grad_fn.saved_tensors
    assert [tuple(tensor.shape) for tensor in saved] == [(2, 8, 16, 32), (2, 2, 16, 32), (2, 2, 16, 32),
                                                         (2, 8, 16, 32), (2, 8, 16), (2,)]
    assert saved[4].dtype == torch.float32 and saved[3].dtype == torch.bfloat16
    output.sum().backward()
    assert query.grad.shape == query.shape and key.grad.shape == key.shape and value.grad.shape == value.shape


def test_a_cuda_plan_holds_no_attention_scores_where_the_cpu_falls_back_to_them():
    """GPT-2 drops attention probabilities (attn_pdrop 0.1): the CPU's sdpa then takes the math path, which holds
    (B, heads, N, N) scores, softmax and mask; CUDA's fused kernels hold none. Traced for CUDA, the dropout costs
    nothing; traced for the CPU, at least two float32 (B, heads, N, N) tensors a layer (2 x 4 x 256^2 x 4 bytes =
    2 MiB each)."""
    import copy
    import dataclasses

    base = SMALL["gpt2"]()
    without = copy.deepcopy(base.config)
    without.attn_pdrop = 0.0
    scores = 2 * 4 * 256 * 256 * 4
    activations = {(device, dropout): estimate_language_memory(
        factory(dataclasses.replace(base, config=base.config if dropout else without), FineTune()), 256, 2, "adamw",
        "fp32", device).activations_bytes for device in ("cuda", "cpu") for dropout in (True, False)}
    assert activations["cuda", True] == activations["cuda", False]
    assert activations["cpu", True] - activations["cpu", False] >= 2 * 2 * scores  # 2 layers


def test_the_fields_rules_of_thumb_are_floors_the_trace_stands_on():
    """Not the method, a floor: mixed-precision Adam holds 16 bytes a parameter in weights, gradients and state (ZeRO
    paper: fp32 weights 4, gradients 4, two moments 8, as autocast trains), and a GPT layer without recomputation at
    least 34·s·b·h bytes of 2-byte activations when no scores are held (Korthikanti et al. 2022, whose 5·a·s/h term
    is the scores fused attention does not keep). GPT-2's layer holds more in eager PyTorch: its GeLU is written as
    separate elementwise operations, each saving its input (the allocator test above agrees with the trace)."""
    import copy
    import dataclasses

    base = SMALL["gpt2"]()
    activations = {}
    for layers in (2, 3):
        config = copy.deepcopy(base.config)
        config.n_layer = layers
        model = dataclasses.replace(base, config=config)
        estimate = estimate_language_memory(factory(model, FineTune()), 128, 2, "adamw", "bf16-true", "cuda")
        activations[layers] = estimate.activations_bytes
    assert activations[3] - activations[2] >= 34 * 128 * 2 * 64
    mixed = estimate_language_memory(factory(base, FineTune()), 128, 2, "adamw", "fp16", "cuda")
    assert mixed.weights_bytes + mixed.gradients_bytes + mixed.optimizer_bytes >= 16 * mixed.parameters
