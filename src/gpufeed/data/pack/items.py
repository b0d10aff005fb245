"""A Dataset's item read and stored for a pack (dataset.py): what an item may be, and `read_item`.

Each item must be an (image, label) pair (a tuple or list of two). The image may be:
- a PIL image, taken as it is (no EXIF orientation applied: the Dataset's picture is what the model sees);
- a uint8 numpy array or torch tensor: H x W x C when the last axis is 1, 3 or 4 (checked first), C x H x W when
  the first axis is 1 or 3 (torchvision.io.read_image), H x W grey; 4 channels are RGBA (alpha dropped);
- a float array or tensor in [0, 1] (ToTensor()'s C x H x W), stored as round(x * 255) (halves to even);
  a value outside [0, 1] (a normalised tensor) or not finite is an error;
- the bytes of a JPEG or PNG file (bytes, bytearray, memoryview, or a 1-D uint8 array or tensor, as
  torchvision.io.read_file gives, starting with the format's signature): decoded as a folder's file is,
  EXIF orientation applied, and stored byte for byte when a folder's file would be (encode.py's passthrough).
The label is an int, a numpy integer or a 0-d integer tensor, 0 or more.

An item of another kind, a `__getitem__` that raises (`dataset[17] raised KeyError: 'x'`) or bytes that do not
decode give an `ItemRead` whose `error` is one line naming the index. Pictures then go through the folder's
policies: images.py's modes and `size`'s scale and centre crop (version 1), encode.py's (version 2). This module
loads no torch: a tensor is recognised when torch is already loaded.
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from gpufeed.data.pack.encode import Stored, StoreOptions, store_encoded, store_picture
from gpufeed.data.pack.images import Decoded, decode_image, decode_picture
from gpufeed.errors import ConfigError

SIGNATURES = {b"\xff\xd8\xff": "JPEG", b"\x89PNG\r\n\x1a\n": "PNG"}
EXPECTED = ("each item must be an (image, label) pair: image a PIL image, a uint8 array or tensor (H x W x C, "
            "C x H x W or H x W), a float one in [0, 1] (C x H x W, as ToTensor gives) or JPEG/PNG bytes; "
            "label an integer")


@dataclass(frozen=True)
class Target:
    """How items are stored: `options` for version 2 (encode.py), else version 1 at `size` with `channels`."""

    options: StoreOptions | None
    size: tuple[int, int] | None
    channels: int


@dataclass(frozen=True)
class ItemRead:
    """One item read and stored: its label and `sample` (Decoded for version 1, Stored for version 2), or `error`
    (one line naming the index); `cause`, the exception behind it when read in this process."""

    index: int
    label: int = 0
    sample: Decoded | Stored | None = None
    error: str | None = None
    cause: BaseException | None = None


def _torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def described(value: Any) -> str:
    """A value in a few words, for an error: "a str ('cat')", "a tuple of 3 items", "a uint8 array (5, 7, 9)"."""
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    if isinstance(value, np.ndarray) or _torch_tensor(value):
        kind = "array" if isinstance(value, np.ndarray) else "tensor"
        return f"a {str(value.dtype).removeprefix('torch.')} {kind} of shape {tuple(value.shape)}"
    text, name = repr(value), type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({text[:40]}{'...' if len(text) > 40 else ''})"


def _as_array(image: Any) -> np.ndarray | None:
    """A numpy view of an array or tensor (floats as float64, exact for float32 and bfloat16), or None."""
    if isinstance(image, np.ndarray):
        return image.astype(np.float64) if image.dtype.kind == "f" else image
    if _torch_tensor(image):
        image = image.detach().cpu()
        return (image.double() if image.is_floating_point() else image).numpy()
    return None


def _encoded(data: bytes, index: int) -> bytes:
    if not any(data.startswith(signature) for signature in SIGNATURES):
        raise ConfigError(f"dataset[{index}]'s image is {len(data)} bytes that are not a JPEG or PNG file (they start "
                          f"{data[:8]!r}); {EXPECTED}")
    return data


def _uint8_pixels(array: np.ndarray, index: int) -> np.ndarray:
    """uint8 or float [0, 1] pixels as uint8; an error naming the item for any other kind."""
    if array.dtype == np.uint8:
        return array
    if array.dtype.kind != "f":
        raise ConfigError(f"dataset[{index}]'s image is an array of {array.dtype}; images must be uint8 (0..255) or "
                          f"floats in [0, 1]; {EXPECTED}")
    if array.size and not (np.isfinite(array).all() and array.min() >= 0 and array.max() <= 1):
        finite = array[np.isfinite(array)]
        found = f"from {finite.min():.4g} to {finite.max():.4g}" if finite.size else "no finite value"
        raise ConfigError(f"dataset[{index}]'s float image holds values {found}"
                          + ("" if finite.size == array.size else " and values that are not finite")
                          + "; float images must lie in [0, 1] (as ToTensor gives them): undo the normalisation "
                            "(x * std + mean) or return the uint8 image")
    return np.rint(array * 255).astype(np.uint8)


def picture_of(image: Any, index: int) -> Image.Image | bytes:
    """The item's image as a PIL image, or as the bytes of a JPEG or PNG file (the module's kinds)."""
    if isinstance(image, Image.Image):
        return image
    if isinstance(image, (bytes, bytearray, memoryview)):
        return _encoded(bytes(image), index)
    array = _as_array(image)
    if array is None:
        raise ConfigError(f"dataset[{index}]'s image is {described(image)}; {EXPECTED}")
    if array.ndim == 1 and array.dtype == np.uint8:
        return _encoded(array.tobytes(), index)
    if array.ndim == 3 and array.shape[2] not in (1, 3, 4) and array.shape[0] in (1, 3):
        array = array.transpose(1, 2, 0)  # C x H x W
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (1, 3, 4))) or 0 in array.shape:
        raise ConfigError(f"dataset[{index}]'s image has shape {tuple(array.shape)}, which is not H x W x C (C 1, 3 "
                          f"or 4), C x H x W (C 1 or 3) or H x W; {EXPECTED}")
    pixels = _uint8_pixels(array, index)
    return Image.fromarray(np.ascontiguousarray(pixels[:, :, 0] if pixels.ndim == 3 and pixels.shape[2] == 1
                                                else pixels))


def label_of(label: Any, index: int) -> int:
    """The item's label as an int: an int, a numpy integer or a 0-d integer array or tensor."""
    integer = (isinstance(label, (int, np.integer)) and not isinstance(label, (bool, np.bool_))
               or isinstance(label, np.ndarray) and label.ndim == 0 and label.dtype.kind in "iu"
               or _torch_tensor(label) and label.ndim == 0 and not label.is_floating_point()
               and not label.is_complex() and str(label.dtype) != "torch.bool")
    if not integer:
        raise ConfigError(f"dataset[{index}]'s label is {described(label)}; labels must be integers (an int, a numpy "
                          f"integer or a 0-d integer tensor)")
    value = int(label.item() if hasattr(label, "item") else label)
    if value < 0:
        raise ConfigError(f"dataset[{index}]'s label is {value}; labels must be 0 or more (one per class)")
    return value


def _stored(picture: Image.Image | bytes, target: Target) -> Decoded | Stored:
    if target.options is not None:
        if isinstance(picture, bytes):
            return store_encoded(picture, target.options)
        return store_picture(picture, target.options)
    if isinstance(picture, bytes):
        return decode_image(io.BytesIO(picture), target.size, target.channels)
    return decode_picture(picture, target.size, target.channels)


def read_item(dataset: Any, index: int, target: Target, keep_cause: bool = False) -> ItemRead:
    """Fetch `dataset[index]` and store it for `target`; a bad item gives an `ItemRead` with its `error`."""
    try:
        item = dataset[index]
    except Exception as error:  # noqa: BLE001 - the user's __getitem__ failing is that item's defect
        text = str(error).splitlines()[0] if str(error) else ""  # a KeyError's is the key's repr: 'x'
        return ItemRead(index, error=f"dataset[{index}] raised {type(error).__name__}" + (f": {text}" if text else ""),
                        cause=error if keep_cause else None)
    try:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ConfigError(f"dataset[{index}] is {described(item)}, not an (image, label) pair; {EXPECTED}")
        label = label_of(item[1], index)
        sample = _stored(picture_of(item[0], index), target)
        if sample.reason is not None:
            raise ConfigError(f"dataset[{index}]'s image cannot be decoded: {sample.reason}")
    except ConfigError as error:
        return ItemRead(index, error=str(error))
    return ItemRead(index, label, sample)
