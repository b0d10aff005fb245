"""The packed dataset format and the feed that moves its batches to the device (docs/design.md has the flow).

Modules:
- format.py: the .gpuf layouts (versions 1 and 2), header parsing and validation, checksum verification
- table.py: the per-sample table of a version-2 file (offset, length, height, width, crc32) and its checks
- writer.py: PackWriter (version 1) and StreamedFile, the atomic streamed file both writers use
- table_writer.py: TableWriter, which streams version-2 samples of any size, raw or JPEG, with their table
- pack.py: pack(), the writers from arrays, .npz files and the built-in dataset
- folder.py: pack_folder(), a folder of images with one subfolder per class
- decode.py: listing and decoding image files in worker processes, and the policies applied to each
- pack_result.py: PackResult, SkippedFile and the destination check every writer makes
- builtin.py: the built-in dataset of shapes and textures, each sample a function of (seed, split, index)
- reader.py: open_packed(), images memory-mapped or in RAM by budget, labels in RAM
- order.py: the order of an epoch, a pure function of (seed, epoch, rank, world size)
- staging.py: threads that prepare batches in order ahead of the consumer, and the pool of ring slots
- transfer.py: copies of staged uint8 batches to the device on a side stream, or the whole dataset kept there
- crops.py: crop boxes for photos, RandomResizedCrop per step and the validation centre crop
- resize.py: a box of a raw or JPEG sample cropped, decoded and resized into a staging slot
- augment.py: batch crop and flip in uint8, conversion to float with normalisation
- feed.py: Feed, order -> staging -> transfer -> augment, with state_dict for exact resume
"""
