"""A DDP training loop on gloo (CPU), launched by torchrun, with one kind of trouble chosen by argv[1]:

balanced        both ranks do the same: many FLOPs over few parameters (12 k), so the all-reduce is small, and
                batches that cost nothing to load (one made batch served again)
slow_data       rank 1's Dataset sleeps 4 ms a sample (32 ms a batch of 8): rank 0 waits for it
slow_backward   rank 1's first layer's gradient hook spins 60 ms: rank 0 waits for its gradients
communication   8.4 M parameters (33.6 MB of gradients) at a batch of 2: the all-reduce outweighs the compute
crash           rank 1 raises at its 8th batch
hang            rank 1 sleeps for ten minutes at its 8th batch
"""

import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

case = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
features = 1024 if case == "communication" else 64


class Samples(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, index):
        if case == "slow_data" and rank == 1:
            time.sleep(0.004)
        return torch.randn(features), index % 4


if case == "communication":
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024), nn.ReLU(), nn.Linear(1024, 4))
    batch = 2
elif case == "balanced":
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    batch = 262144
else:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))
    batch = 8

if case == "slow_backward" and rank == 1:
    def spin(grad):
        end = time.perf_counter() + 0.060
        while time.perf_counter() < end:
            pass
        return grad

    model[0].weight.register_hook(spin)

ddp = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
if case == "balanced":
    class Made(Dataset):  # a whole batch per index, made once
        made = (torch.randn(batch, features), torch.arange(batch) % 4)

        def __len__(self):
            return 100_000

        def __getitem__(self, index):
            return self.made

    loader = DataLoader(Made(), batch_size=None)
else:
    loader = DataLoader(Samples(), batch_size=batch)
for step, (inputs, targets) in enumerate(loader):
    if case == "crash" and rank == 1 and step == 8:
        raise ZeroDivisionError("rank 1 fails on purpose")
    if case == "hang" and rank == 1 and step == 8:
        time.sleep(600)
    loss = F.cross_entropy(ddp(inputs), targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
dist.destroy_process_group()
