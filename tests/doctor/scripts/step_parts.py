"""Known parts of a step, by sleeps: in loop iteration j (from 0) the model's training forward sleeps
FORWARD_S x (1 + j % 2) and the optimizer's step OPTIMIZER_S x (1 + j % 2) (so a part counted in the wrong step
shows), the loss's backward BACKWARD_S, and every iteration ends with a validation forward of the same model under
torch.no_grad() that sleeps VALIDATION_S, ten times the longest training forward (so that counting it in the step's
forward would show whatever the machine's load). Batches of 4 come from a DataLoader whose samples each take
SAMPLE_S to load (the data wait). A first iteration and `--steps` more."""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FORWARD_S, OPTIMIZER_S, BACKWARD_S, SAMPLE_S, VALIDATION_S = 0.01, 0.01, 0.015, 0.001, 0.2


class Slow(Dataset):
    def __len__(self) -> int:
        return 400

    def __getitem__(self, index: int):
        time.sleep(SAMPLE_S)
        return torch.full((3,), float(index % 7)), index % 2


class SleepyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear, self.seconds = nn.Linear(3, 2), FORWARD_S

    def forward(self, inputs):
        time.sleep(self.seconds)
        return self.linear(inputs)


class SlowBackward(torch.autograd.Function):
    """The identity, whose backward sleeps BACKWARD_S."""

    @staticmethod
    def forward(context, tensor):
        return tensor.clone()

    @staticmethod
    def backward(context, grad):
        time.sleep(BACKWARD_S)
        return grad


class SleepySGD(torch.optim.Optimizer):
    """Plain SGD whose step also sleeps `seconds`."""

    def __init__(self, parameters, lr: float = 0.01):
        super().__init__(parameters, {"lr": lr})
        self.seconds = OPTIMIZER_S

    @torch.no_grad()
    def step(self, closure=None):
        time.sleep(self.seconds)
        for group in self.param_groups:
            for parameter in group["params"]:
                if parameter.grad is not None:
                    parameter.add_(parameter.grad, alpha=-group["lr"])


def main(steps: int) -> None:
    torch.manual_seed(0)
    model, held_out = SleepyModel(), torch.randn(4, 3)
    optimizer = SleepySGD(model.parameters())
    batches = iter(DataLoader(Slow(), batch_size=4))
    for iteration in range(steps + 1):
        inputs, labels = next(batches)
        model.seconds, optimizer.seconds = FORWARD_S * (1 + iteration % 2), OPTIMIZER_S * (1 + iteration % 2)
        loss = nn.functional.cross_entropy(SlowBackward.apply(model(inputs)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.seconds = VALIDATION_S
        with torch.no_grad():
            model(held_out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    main(parser.parse_args().steps)
