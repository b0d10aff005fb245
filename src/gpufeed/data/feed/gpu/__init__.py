"""The GPU-decode path of `Feed` (`decode="gpu"`): JPEG bytes cross the bus, and the GPU decodes, crops and resizes.
Builds on feed/'s stages (staging, draws); only feed/feed.py imports it.

- batches.py: `choose_decode` (whether the GPU decodes) and `gpu_decoded_batches`, the decode thread and its stream
- byte_staging.py: the CPU's share: a batch's JPEG files back to back in a pinned `ByteSlot`, with boxes and draws
- decoder.py: `DeviceJpegDecoder`, nvImageCodec's region decode of a batch into one padded canvas
- resize.py: the batched resize of a canvas of crops of different sizes, two batched matrix products
"""
