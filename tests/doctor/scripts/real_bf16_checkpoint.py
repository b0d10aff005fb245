"""A CPU training loop in bf16 autocast (no torch.compile) that switches between model.train() and model.eval():
every --eval-every steps it scores a held-out batch, and every --save-every steps it writes a checkpoint
(model, optimizer and step) with torch.save, on the training thread. MLP on synthetic regression data held in
memory; batches drawn by a random permutation, no DataLoader."""

import argparse
import os
import tempfile

import torch
from torch import nn


def make_model(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(128, width), nn.GELU(), nn.LayerNorm(width), nn.Dropout(0.1),
                         nn.Linear(width, width), nn.GELU(), nn.Linear(width, 1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--eval-every", type=int, default=7)
    parser.add_argument("--save-every", type=int, default=25)
    parser.add_argument("--out", default=None, help="checkpoint folder (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="checkpoints-")
    torch.manual_seed(0)
    inputs = torch.randn(8192, 128)
    targets = inputs[:, :4].sum(1, keepdim=True) + 0.1 * torch.randn(8192, 1)
    held_out = torch.randn(512, 128)
    held_targets = held_out[:, :4].sum(1, keepdim=True)
    model = make_model(args.width)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(1, args.steps + 1):
        model.train()
        rows = torch.randint(0, len(inputs), (args.batch_size,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(inputs[rows]).float(), targets[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % args.eval_every == 0:
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
                held_loss = nn.functional.mse_loss(model(held_out).float(), held_targets)
            print(f"step {step} train {loss.item():.4f} held-out {held_loss.item():.4f}")
        if step % args.save_every == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                       os.path.join(out, f"step{step:05d}.pt"))


if __name__ == "__main__":
    main()
