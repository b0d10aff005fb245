"""Writes what it sees of its surroundings (__name__, argv, sys.path[0], the working directory) as JSON to the
path in its first argument, then trains the number of steps in its second (10 by default); the doctor must not
change what it sees. With 0 steps it does not import torch (a plain run for reference takes a fraction of a
second)."""

import json
import os
import sys

if __name__ == "__main__":
    seen = {"name": __name__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd()}
    with open(sys.argv[1], "w") as file:
        json.dump(seen, file)
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    if steps:
        import torch
        from torch import nn

        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            model(torch.randn(8, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
