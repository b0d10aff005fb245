"""The `.gpuf` packed dataset format: what a file holds, and reading and checking it. Builds on nothing else in data/.

- layout.py: the layouts of versions 1 and 2 (byte by byte), the constants and the header fields both share
- header.py: `Header` (version 1: one shape for every sample) and `read_header` for either version
- table.py: version 2's `TableHeader` and per-sample table (`SampleTable`: offset, length, height, width, crc32)
- verify.py: `verify_checksums`, every chunk's and every sample's crc32, naming the damaged samples
- statistics.py: the per-channel mean and std that headers hold, from exact integer sums (numpy only)
- reader.py: `open_packed` and `PackedDataset`: samples memory-mapped or in RAM by budget, labels in RAM
"""
