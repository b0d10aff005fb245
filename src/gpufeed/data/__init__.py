"""The packed dataset format and the feed that moves its batches to the device (docs/design.md has the flow), in
three stages, each a folder whose `__init__.py` is its map:

- format/: the `.gpuf` file: its layouts (versions 1 and 2), headers and per-sample table, reading and verifying
- pack/: writing `.gpuf` files from arrays, `.npz` files, the built-in dataset, a folder of images or a Dataset
- feed/: `Feed`, order -> staging -> transfer -> augment, on the CPU or the device; feed/gpu/ decodes JPEG on the GPU

Imports flow one way: pack/ and feed/ build on format/, never on each other; feed/gpu/ builds on feed/'s stages
(staging, draws, crops), and only `feed/feed.py` (`Feed`) imports feed/gpu/.
"""
