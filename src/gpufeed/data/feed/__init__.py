"""`Feed`: batches from a packed dataset to the device, order -> staging -> transfer -> augment. "device" is where
the batches go (a CUDA GPU, MPS or the CPU); gpu/ is the path that decodes JPEG samples on a CUDA GPU.

- feed.py: `Feed`, which assembles the stages, with state_dict for exact resume
- order.py: the order of an epoch, a pure function of (seed, epoch, rank, world size)
- staging.py: threads that prepare batches in order ahead of the consumer, and the pools of ring slots and memory
- transfer.py: copies of staged uint8 batches to the device on a side stream, or the whole dataset kept there
- draws.py: `Draws`, one batch's augmentation draws, the typed object staging, transfer and gpu/ carry
- augment.py: the augmentations: their draws made, crop and flip applied in uint8, conversion to normalised float
- crops.py: crop boxes for photos, RandomResizedCrop per step and the validation centre crop
- cpu_resize.py: on the staging threads, a box of a raw or JPEG sample cut (the JPEG decoded) and resized into a slot
- gpu/: the GPU-decode path (its `__init__.py` is its map)
"""
