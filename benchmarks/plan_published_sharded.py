"""The sharded language-model plan's time and memory against torchtitan's published Llama 3.1 8B runs.

    python benchmarks/plan_published_sharded.py

torchtitan's benchmarks/llama3_h100_202412_torchtitan.md (commit 820504e; torch 1963fc8, torchtitan 9dec370,
2024-12): Llama 3.1 8B on H100s with 96 GB HBM2e at 500 W (not a catalog card: the catalog's H100 SXM5 80GB is used,
whose dense bf16 peak torchtitan's own MFU uses), FSDP, local batch 2 x 8,192 tokens, selective per-op activation
checkpointing (matrix products kept, so none recomputed; planned without checkpointing, which keeps more), bf16
with fp32 reduce, AdamW:
- Table 1, 8 GPUs, eager: 5,762 tokens/s a GPU, 82.4 GiB. USED TO FIT plan/language/throughput.py's efficiency.
- Table 3, 128 GPUs (16 nodes, 400 Gb/s a GPU), eager: 5,605 tokens/s a GPU, 67.0 GiB. A CHECK: the time, and the
  memory the sharding saves from 8 to 128 GPUs (82.4 - 67.0 GiB; selective checkpointing's activations, which the
  plan cannot model, are the same in both and cancel).
The published memory itself is not compared: selective checkpointing keeps part of the activations, between the
plan's no checkpointing and full checkpointing, both printed for reference. Nothing is timed here: every figure is
arithmetic on one trace (about a minute on 2 cores).
"""

from __future__ import annotations

import platform

import torch
import transformers
from torch import nn

from gpufeed.hardware.catalog import find_gpu
from gpufeed.plan.language.model import FineTune, build_language_model, resolve_language_model
from gpufeed.plan.language.sharding import Sharding, shard_memory, shard_units
from gpufeed.plan.language.throughput import language_time
from gpufeed.plan.memory import estimate_language_memory

GIB = 2**30
PUBLISHED = {8: (5762, 82.4), 128: (5605, 67.0)}


def main() -> None:
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {platform.processor() or 'cpu'}")
    model = resolve_language_model("llama-3.1-8b")
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    peaks = {}
    for checkpointing in (False, True):
        tune = FineTune(checkpointing=checkpointing)

        def factory(tune: FineTune = tune) -> nn.Module:
            return build_language_model(model, tune)[0]

        memory = estimate_language_memory(factory, 8192, 2, "adamw", "bf16", "cuda")
        with torch.device("meta"):
            units = shard_units(factory())
        for gpus in PUBLISHED:
            sharded = shard_memory(memory, units, Sharding("fsdp", gpus))
            peaks[checkpointing, gpus] = sharded.peak_bytes
            if checkpointing:
                continue
            time = language_time(memory, units, Sharding("fsdp", gpus), h100, "bf16")
            rate, _ = PUBLISHED[gpus]
            role = "fitted" if gpus == 8 else "check"
            print(f"{gpus:>4} GPUs ({role}): planned {time.tokens_per_s_per_gpu:,.0f} tokens/s a GPU "
                  f"(band {2 * 8192 / time.step_slow_s:,.0f}-{2 * 8192 / time.step_fast_s:,.0f}), published "
                  f"{rate:,}: {time.tokens_per_s_per_gpu / rate - 1:+.1%}; communication {time.communication_s:.2f} s "
                  f"of a {time.compute_s:.2f} s compute ({time.link})")
    for checkpointing in (False, True):
        words = "full checkpointing" if checkpointing else "no checkpointing"
        print(f"per GPU, {words}: 8 GPUs {peaks[checkpointing, 8] / GIB:.1f} GiB, 128 GPUs "
              f"{peaks[checkpointing, 128] / GIB:.1f} GiB (published, selective: 82.4 and 67.0 GiB)")
    saved = (peaks[False, 8] - peaks[False, 128]) / GIB
    print(f"saved from 8 to 128 GPUs: planned {saved:.1f} GiB, published {82.4 - 67.0:.1f} GiB: "
          f"{saved / (82.4 - 67.0) - 1:+.1%} (check)")


if __name__ == "__main__":
    main()
