"""The epoch order: coverage, equal batches per rank, determinism, and the DDP-equivalence property."""

import numpy as np
import pytest

from gpufeed.data.feed.order import batches_per_epoch, epoch_order
from gpufeed.errors import ConfigError


@pytest.mark.parametrize("count", [1000, 1001, 997, 37])
@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_every_sample_exactly_once_without_drop_last(count, world_size):
    batch = 16
    orders = [epoch_order(count, batch, seed=3, epoch=1, rank=r, world_size=world_size, drop_last=False)
              for r in range(world_size)]
    lengths = {len(order) for order in orders}
    assert lengths == {batches_per_epoch(count, batch, world_size, drop_last=False)}
    seen = np.concatenate([np.concatenate(order.batches) for order in orders])
    repeated = orders[0].repeated
    assert len(seen) == count + repeated
    assert set(seen.tolist()) == set(range(count))
    assert all(len(b) >= 1 for order in orders for b in order.batches)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_drop_last_sees_each_sample_at_most_once_and_drops_only_the_tail(world_size):
    count, batch = 1003, 32
    orders = [epoch_order(count, batch, 0, 0, r, world_size, drop_last=True) for r in range(world_size)]
    seen = np.concatenate([np.concatenate(o.batches) for o in orders])
    steps = count // (batch * world_size)
    assert len(seen) == steps * batch * world_size == len(set(seen.tolist()))
    assert orders[0].dropped == count - len(seen)
    assert all(len(b) == batch for o in orders for b in o.batches)


def test_order_is_a_pure_function_of_seed_and_epoch():
    first = epoch_order(500, 10, seed=7, epoch=2)
    again = epoch_order(500, 10, seed=7, epoch=2)
    other_epoch = epoch_order(500, 10, seed=7, epoch=3)
    other_seed = epoch_order(500, 10, seed=8, epoch=2)
    flat = np.concatenate(first.batches)
    assert np.array_equal(flat, np.concatenate(again.batches))
    assert not np.array_equal(flat, np.concatenate(other_epoch.batches))
    assert not np.array_equal(flat, np.concatenate(other_seed.batches))


def test_ranks_together_equal_one_process_with_the_global_batch():
    world_size, batch = 4, 8
    single = epoch_order(640, batch * world_size, seed=1, epoch=0)
    ranks = [epoch_order(640, batch, seed=1, epoch=0, rank=r, world_size=world_size) for r in range(world_size)]
    for step, global_batch in enumerate(single.batches):
        assert np.array_equal(global_batch, np.concatenate([r.batches[step] for r in ranks]))


def test_no_shuffle_is_sequential():
    order = epoch_order(10, 3, seed=0, epoch=5, shuffle=False, drop_last=False)
    assert [b.tolist() for b in order.batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


@pytest.mark.parametrize("arguments, words", [
    (dict(count=10, batch_size=11), "fewer than one step"),
    (dict(count=10, batch_size=0), "positive"),
    (dict(count=10, batch_size=2, rank=2, world_size=2), "rank 2"),
])
def test_bad_arguments_name_the_fix(arguments, words):
    options = dict(seed=0, epoch=0) | arguments
    with pytest.raises(ConfigError, match=words):
        epoch_order(**options)
