"""A GAN-style loop over a streaming IterableDataset (shards split between DataLoader workers with
get_worker_info), two models with two Adam optimizers: a discriminator step, then a generator step, on every
batch; --critic N takes N discriminator steps per generator step (WGAN style), each on its own batch."""

import argparse
import math

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Stream(IterableDataset):
    """Samples from a ring in 2-D, produced on the fly, `count` in all, split between workers."""

    def __init__(self, count: int):
        self.count = count

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        generator = torch.Generator().manual_seed(1234 + worker)
        for _ in range(worker, self.count, workers):
            angle = 2 * math.pi * torch.rand((), generator=generator)
            yield torch.stack([angle.cos(), angle.sin()]) + 0.05 * torch.randn(2, generator=generator)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--critic", type=int, default=1)
    parser.add_argument("--noise", type=int, default=16)
    args = parser.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Stream(200_000), batch_size=args.batch_size, num_workers=args.workers)
    generator = nn.Sequential(nn.Linear(args.noise, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 2))
    discriminator = nn.Sequential(nn.Linear(2, 128), nn.LeakyReLU(0.2), nn.Linear(128, 128), nn.LeakyReLU(0.2),
                                  nn.Linear(128, 1))
    optimizer_g = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCEWithLogitsLoss()
    for iteration, real in enumerate(loader):
        size = real.shape[0]
        fake = generator(torch.randn(size, args.noise))
        loss_d = criterion(discriminator(real), torch.ones(size, 1)) + \
            criterion(discriminator(fake.detach()), torch.zeros(size, 1))
        optimizer_d.zero_grad()
        loss_d.backward()
        optimizer_d.step()
        if (iteration + 1) % args.critic:
            continue
        loss_g = criterion(discriminator(fake), torch.ones(size, 1))
        optimizer_g.zero_grad()
        loss_g.backward()
        optimizer_g.step()
        if iteration % 100 == 0:
            print(f"iteration {iteration} D {loss_d.item():.3f} G {loss_g.item():.3f}")


if __name__ == "__main__":
    main()
