"""A stand-in for `nvidia.nvimgcodec` with the calls `gpufeed.data.feed.gpu.decoder` makes (nvImageCodec 0.7-0.9),
decoding with Pillow on the CPU into the given host buffers, and recording what it was asked."""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
from PIL import Image


@dataclass(frozen=True)
class Region:
    start_y: int
    start_x: int
    end_y: int
    end_x: int


class FakeImage:
    def __init__(self, array: np.ndarray):
        self.array = array


class CodeStream:
    def __init__(self, data, region: Region | None = None):
        self.data, self.region = np.asarray(data), region
        try:
            self.width, self.height = Image.open(io.BytesIO(self.data.tobytes())).size
        except OSError as error:
            raise RuntimeError(f"Failed to get image info ({error})") from None

    def get_sub_code_stream(self, image_idx: int = 0, region: Region | None = None) -> CodeStream:
        return CodeStream(self.data, region)


class FakeDecoder:
    def __init__(self, codec, **options):
        self.codec, self.options = codec, options

    def decode(self, sources, images=None, params=None, cuda_stream=0):
        self.codec.calls.append(dict(sources=list(sources), images=images, params=params, cuda_stream=cuda_stream))
        results = []
        for source, target in zip(sources, images, strict=True):
            region = source.region
            try:
                picture = Image.open(io.BytesIO(source.data.tobytes()))
                pixels = np.asarray(picture.convert("L" if params["color_spec"] == "GRAY" else "RGB"))
            except OSError:
                results.append(None)  # as nvImageCodec: no image at that position
                continue
            crop = pixels[region.start_y:region.end_y, region.start_x:region.end_x]
            target.array[...] = crop.reshape(target.array.shape)
            results.append(target)
        return results


class FakeCodec:
    """The module: `codec.calls` lists each `Decoder.decode` call's arguments."""

    __version__ = "0.9.0"
    NVIMGCODEC_DEVICE_CPU_ONLY = -99999
    Region, CodeStream = Region, CodeStream

    class BackendKind:
        CPU_ONLY, GPU_ONLY, HYBRID_CPU_GPU, HW_GPU_ONLY = "CPU_ONLY", "GPU_ONLY", "HYBRID_CPU_GPU", "HW_GPU_ONLY"

    class ColorSpec:
        SRGB, GRAY = "SRGB", "GRAY"

    def __init__(self):
        self.calls, self.decoders = [], []

    @staticmethod
    def Backend(kind):
        return kind

    @staticmethod
    def DecodeParams(**params):
        return params

    @staticmethod
    def as_image(target, cuda_stream=0):
        assert isinstance(target, np.ndarray), "host buffers reach nvImageCodec as numpy views"
        return FakeImage(target)

    def Decoder(self, **options):
        decoder = FakeDecoder(self, **options)
        self.decoders.append(decoder)
        return decoder
