"""One rank of a real sharded training step on the CPU, for tests/plan/test_sharding.py: a small Llama under torch's
FSDP2 (`fully_shard` on each decoder layer, then the root) or DistributedDataParallel, AdamW, three steps. Prints one
JSON line: the rank, the CPU allocator's peak over steps 2 and 3 (plan/check.py's profiled_cpu_peak) and the bytes
of this rank's local shards of the weights, the gradients and the optimizer state after the last step.

usage: sharded_step.py fsdp|ddp fp32|bf16 gloo|fake RANK   (gloo: run under torch.distributed.run)
"""

import json
import sys

import torch
import torch.distributed as dist
from torch.profiler import record_function
from transformers import LlamaConfig, LlamaForCausalLM

from gpufeed.plan.check import profiled_cpu_peak

CONFIG = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=4096, max_position_embeddings=256, use_cache=False,
              tie_word_embeddings=False)
BATCH, TOKENS = 2, 128


def local_bytes(tensors) -> int:
    total = 0
    for tensor in tensors:
        if tensor is None:
            continue
        tensor = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        total += tensor.numel() * tensor.element_size()
    return total


def main() -> None:
    strategy, precision, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    if backend == "fake":  # collectives that move nothing, finish at once: one rank's memory, no timing in it
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=int(sys.argv[4]), world_size=2)
    else:
        dist.init_process_group("gloo")
    torch.manual_seed(0)
    states = {}

    def run() -> None:
        model = LlamaForCausalLM(LlamaConfig(**CONFIG))
        if strategy == "ddp":
            from torch.nn.parallel import DistributedDataParallel

            model = DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
                if precision == "bf16" else MixedPrecisionPolicy()
            for layer in model.model.layers:
                fully_shard(layer, mp_policy=policy)
            fully_shard(model, mp_policy=policy)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
        ids = torch.randint(0, CONFIG["vocab_size"], (BATCH, TOKENS))
        for step in range(3):
            with record_function(f"step {step}"):
                optimizer.zero_grad(set_to_none=True)
                with torch.autocast("cpu", torch.bfloat16, enabled=strategy == "ddp" and precision == "bf16"):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optimizer.step()
        states["weights"] = local_bytes(model.parameters())
        states["gradients"] = local_bytes(p.grad for p in model.parameters())
        states["optimizer"] = local_bytes(t for s in optimizer.state.values() for t in s.values() if t.dim())

    peak = profiled_cpu_peak(run, {"step 1", "step 2"})
    print(json.dumps({"rank": dist.get_rank(), "peak_bytes": peak, **states}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
