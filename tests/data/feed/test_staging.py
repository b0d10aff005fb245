"""OutputPool: the memory of a finished batch is lent again only once nothing refers to it."""

import torch

from gpufeed.data.feed.staging import OutputPool


def test_a_buffer_is_lent_again_only_when_no_tensor_shares_it():
    pool = OutputPool(limit=2, smallest_bytes=0)
    first = pool.take((4, 5), torch.float32)
    assert first.shape == (4, 5) and first.dtype == torch.float32 and first.is_contiguous()
    address = first.data_ptr()
    row = first[1]  # a view keeps the memory in use after the batch itself is gone
    del first
    second = pool.take((4, 5), torch.float32)
    assert second.data_ptr() != address
    del row
    third = pool.take((4, 5), torch.float32)
    assert third.data_ptr() == address  # the first buffer, free again
    assert pool.take((4, 5), torch.bfloat16).data_ptr() not in (address, second.data_ptr())  # another size


def test_beyond_the_limit_a_batch_gets_memory_of_its_own():
    pool = OutputPool(limit=1, smallest_bytes=0)
    kept = pool.take((8,), torch.float32)
    extra = pool.take((8,), torch.float32)
    extra.fill_(1.0)
    kept.fill_(2.0)
    assert torch.equal(extra, torch.ones(8)) and extra.data_ptr() != kept.data_ptr()
    address = kept.data_ptr()
    del kept
    assert pool.take((8,), torch.float32).data_ptr() == address


def test_batches_under_the_smallest_size_come_from_torch():
    pool = OutputPool(limit=2, smallest_bytes=100)
    pool.take((24,), torch.float32)  # 96 bytes
    large = pool.take((25,), torch.float32)  # 100 bytes: lent
    assert [buffer.ctypes.data for buffer in pool.buffers] == [large.data_ptr()]


def test_images_come_in_the_memory_format_asked_for():
    pool = OutputPool(limit=2, smallest_bytes=0)
    last = pool.take_images(3, (3, 4, 5), torch.bfloat16, channels_last=True)
    first = pool.take_images(3, (3, 4, 5), torch.float32, channels_last=False)
    assert last.shape == first.shape == (3, 3, 4, 5) and last.dtype == torch.bfloat16
    assert last.is_contiguous(memory_format=torch.channels_last) and first.is_contiguous()
