"""Validation: accuracy and mean loss of a model over a feed, summed across the ranks."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpufeed.data.feed.feed import Feed
from gpufeed.train import distributed


@torch.no_grad()
def evaluate(model: torch.nn.Module, feed: Feed, precision, context: distributed.DistributedContext) -> tuple:
    """(accuracy, mean loss) over the feed, summed across ranks."""
    model.eval()
    correct = torch.zeros((), dtype=torch.float64, device=context.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=context.device)
    count = 0
    for images, labels in feed:
        with precision.autocast(context.device.type):
            logits = model(images)  # (B, classes)
        correct += (logits.argmax(dim=1) == labels).sum()
        loss_sum += F.cross_entropy(logits.float(), labels, reduction="sum")
        count += len(labels)
    model.train()
    correct_total, loss_total, count_total = distributed.all_reduce_sum(context, [correct.item(), loss_sum.item(),
                                                                                  float(count)])
    return correct_total / count_total, loss_total / count_total
