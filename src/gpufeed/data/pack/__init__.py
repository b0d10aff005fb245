"""Writing `.gpuf` packed datasets (the format is in data/format/). `pack()` is in sources.py.

- sources.py: `pack()`, which picks the writer from the source, and the writers from arrays, `.npz` files and the
  built-in dataset
- folder.py: `pack_folder()`, a folder of images with one subfolder per class
- cache.py: `pack_cached()`, a folder packed once into the cache folder, keyed by its files and the options,
  reused while they stay the same, under a file lock, within a bounded size; `cache_summary()` for gpufeed info
- dataset.py: `pack_dataset()`, a map-style Dataset of (image, label) items, read in DataLoader workers and stored as
  a folder's files are
- items.py: one item of a Dataset read and stored: the kinds of image and label it may be, a bad one named by index
- images.py: listing a folder's image files, and decoding each in worker processes with the policies applied
- encode.py: storing one image (a file, its bytes or a picture) for a version-2 pack: scaled to `max_side`, raw or
  JPEG, or passed through
- writer.py: `StreamedFile`, the atomic streamed file both writers use, and `PackWriter` (version 1)
- table_writer.py: `TableWriter` (version 2): samples of any size, raw or JPEG, with their table
- result.py: `PackResult`, `SkippedFile` and the destination check every writer makes
- builtin.py: the built-in dataset of shapes and textures, each sample a function of (seed, split, index)
"""
