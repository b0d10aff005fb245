"""The node around a language model's GPUs (plan/language/host.py): RAM, loading, disk, cores and power for the
GPUs the job uses, against hand-derived figures."""

from tests.plan.sharding_cases import UNITS, T, estimate

from gpufeed.hardware.catalog import find_gpu
from gpufeed.plan.language.host import WORKER_BYTES, plan_language_host
from gpufeed.plan.language.sharding import Sharding, shard_memory

GIB = 2**30


def test_a_one_gpu_job_on_a_board_sold_card_is_sized_for_that_gpu():
    b200 = find_gpu("NVIDIA B200")  # 180 GiB, 1,000 W, sold only on 8-GPU boards
    memory = estimate()  # 1 M parameters, fp32 weights (4 B) + AdamW (8 B), all trained
    host = plan_language_host(b200, memory, None, gpus=1, gpus_per_node=8, tokens=10**6, vocabulary=50_257,
                              method="full")
    assert host.gpus == 1 and host.nodes == 1 and "8-GPU" in host.system
    # RAM: the rule for one GPU's 180 GiB (at least 192 GiB, ideally 384 GiB); the job holds far less
    assert (host.ram_minimum_bytes, host.ram_bytes) == (192 * GIB, 384 * GIB)
    # power: 1 x 1,000 W + 2 CPUs x 350 W + platform 0.7 x 1,000 W = 2,400 W -> one 3,000 W supply
    assert host.psu_watts == 3_000 and "the board holds 8" in host.psu_arithmetic
    # disk: base checkpoint 2 B x 1 M + 4 x (4 MB weights + 8 MB state) + 1 M tokens x 2 B (GPT-2's 50,257 fit uint16)
    assert host.disk_bytes == 2 * T + 4 * (4 * T + 8 * T) + 2 * 10**6
    assert host.cpu_cores == 2 and host.loading_assumed == "each rank loads the full checkpoint"
    assert host.loading["each rank loads the full checkpoint"] == 2 * T


def test_a_sharded_node_loads_its_shard_and_holds_the_offloaded_state():
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    memory = estimate()
    sharding = Sharding("fsdp", 16, offload="optimizer")  # 2 nodes of 8
    sharded = shard_memory(memory, UNITS, sharding)
    host = plan_language_host(h100, memory, sharded, gpus=16, gpus_per_node=8, tokens=10**6, vocabulary=128_256,
                              method="full")
    assert host.nodes == 2 and host.gpus == 8
    assert host.loading == {"each rank loads the full checkpoint": 8 * 2 * T,
                            "rank 0 loads it and sends it to the others": 2 * T,
                            "meta-device init, each rank reads its shard": 2 * T // 2}
    assert host.loading_assumed == "meta-device init, each rank reads its shard"
    assert host.offloaded_bytes == 8 * (8 * T // 16)  # each rank's optimizer shard, 8 ranks on the node
    assert f"8 loader workers x {WORKER_BYTES / 2**20:.1f} MiB" in host.ram_reason
    assert host.disk_bytes == 2 * T + 4 * (4 * T + 8 * T) + 4 * 10**6  # Llama 3's vocabulary needs uint32
    # 8 H100 SXM on their board: the server rule, 8 x 700 + 700 + 0.7 x 5,600 = 10,220 W -> 4 x 3,000 W
    assert host.psu_watts == 12_000 and "the board holds" not in host.psu_arithmetic


def test_hsdp_keeps_a_whole_copy_on_each_node():
    h100 = find_gpu("NVIDIA H100 80GB HBM3")
    memory = estimate()
    sharded = shard_memory(memory, UNITS, Sharding("hsdp", 16, gpus_per_node=8))
    host = plan_language_host(h100, memory, sharded, gpus=16, gpus_per_node=8, tokens=1, vocabulary=10,
                              method="full")
    assert host.loading["meta-device init, each rank reads its shard"] == 2 * T
