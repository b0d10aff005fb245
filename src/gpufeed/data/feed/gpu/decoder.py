"""Decode a batch of JPEG samples on the GPU with nvJPEG, through NVIDIA's nvImageCodec Python package
(`nvidia-nvimgcodec-cu12`; the optional extra `pip install 'gpufeed[nvjpeg]'`, never needed on a CPU machine).

Each sample is decoded only inside its crop box (the decoder's region decode), straight into its slot of one
padded device canvas (B, Hc, Wc, C) uint8, with one `Decoder.decode` call for the whole batch; `resize.py`
then resizes the canvas in one batched operation.

Written against nvImageCodec 0.7-0.9 (checked on 0.9.0, the release on PyPI: its docstrings, and its CPU backend
run on JPEG batches here; source read: github.com/NVIDIA/nvImageCodec, python/decoder.cpp, code_stream.cpp,
region.cpp and test/python/test_decode.py at v0.8.0). The calls used:

    from nvidia import nvimgcodec
    decoder = nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=N, backends=[nvimgcodec.Backend(kind), ...],
                                 options=":fancy_upsampling=1")
    stream = nvimgcodec.CodeStream(uint8_array).get_sub_code_stream(region=nvimgcodec.Region(y0, x0, y1, x1))
    target = nvimgcodec.as_image(canvas[k, :h, :w])     # a strided view; rows may be padded
    images = decoder.decode([stream, ...], images=[target, ...], params=nvimgcodec.DecodeParams(
        apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB), cuda_stream=torch_stream.cuda_stream)

`decode` returns, per sample, the Image it decoded into, or None when that sample could not be decoded. Region
decode became `CodeStream.get_sub_code_stream(region=...)` and decoding into given images arrived in 0.7 (0.3-0.5
had `DecodeSource(code_stream, region)`, 0.6 `getSubCodeStream`); older releases are reported as unusable, and the
feed then decodes on CPU threads. Backends: nvJPEG's hardware decoder (A100, H100 and later), its GPU and its
hybrid CPU-GPU decoders; nvImageCodec's CPU-only backend (libjpeg-turbo) serves only `device="cpu"`, for tests. Fancy
upsampling of the chroma planes is asked for, as libjpeg-turbo does by default, so both paths see the same pixels
within nvJPEG's IDCT rounding. nvImageCodec's own log is silenced (PYNVIMGCODEC_VERBOSITY=0 unless set): a sample it
cannot decode becomes a `FormatError` naming it. Importing it still prints, once, a line for each optional codec
library it does not find (nvJPEG2000, nvTIFF).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import simplejpeg
import torch

from gpufeed.errors import FormatError

MINIMUM_VERSION = (0, 7)
INSTALL_HINT = "pip install 'gpufeed[nvjpeg]'"
DECODER_OPTIONS = ":fancy_upsampling=1"
CPU_ONLY_DEVICE_ID = -99999  # NVIMGCODEC_DEVICE_CPU_ONLY in nvimgcodec.h, for releases that do not export it
PROBE_TOLERANCE = 6  # levels: nvImageCodec's own tests allow this against libjpeg-turbo (test/python/utils.py)


class DecoderUnavailable(Exception):
    """nvImageCodec cannot decode here; `reason` says why in a phrase."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def load_nvimgcodec():
    """The `nvidia.nvimgcodec` module; `DecoderUnavailable` when it is not importable or older than 0.7."""
    os.environ.setdefault("PYNVIMGCODEC_VERBOSITY", "0")
    try:
        from nvidia import nvimgcodec
    except (ImportError, OSError) as error:
        raise DecoderUnavailable(f"nvImageCodec is not installed ({error})") from None
    version = str(getattr(nvimgcodec, "__version__", "0"))
    if parse_version(version) < MINIMUM_VERSION or not hasattr(nvimgcodec.CodeStream, "get_sub_code_stream"):
        raise DecoderUnavailable(f"nvImageCodec {version} is older than 0.7, the first release with region decode "
                                 f"into given buffers")
    return nvimgcodec


def parse_version(text: str) -> tuple[int, ...]:
    """'0.9.0.20' -> (0, 9, 0, 20); parts that are not numbers end it."""
    numbers = []
    for part in text.split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def box_region(codec, box):
    """A crop box (top, left, height, width) in source pixels as the decoder's Region: start (y, x) inclusive,
    end (y, x) exclusive."""
    top, left, height, width = (int(v) for v in box)
    return codec.Region(top, left, top + height, left + width)


class DeviceJpegDecoder:
    """Decodes batches of JPEG samples, each inside its crop box, into a padded canvas on `device`."""

    def __init__(self, device: torch.device, channels: int, threads: int = 0, codec=None):
        self.codec = load_nvimgcodec() if codec is None else codec
        self.device, self.channels = device, int(channels)
        codec, on_cpu = self.codec, device.type == "cpu"
        kinds = [codec.BackendKind.CPU_ONLY] if on_cpu else [
            codec.BackendKind.HW_GPU_ONLY, codec.BackendKind.GPU_ONLY, codec.BackendKind.HYBRID_CPU_GPU]
        device_id = getattr(codec, "NVIMGCODEC_DEVICE_CPU_ONLY", CPU_ONLY_DEVICE_ID) if on_cpu else device.index or 0
        try:
            self.decoder = codec.Decoder(device_id=device_id, max_num_cpu_threads=int(threads),
                                         backends=[codec.Backend(kind) for kind in kinds], options=DECODER_OPTIONS)
        except RuntimeError as error:
            raise DecoderUnavailable(f"nvImageCodec could not start a decoder on {device} ({error})") from None
        colour = codec.ColorSpec.GRAY if self.channels == 1 else codec.ColorSpec.SRGB
        self.params = codec.DecodeParams(apply_exif_orientation=False, color_spec=colour)

    def decode_crops(self, samples: list[np.ndarray], boxes: np.ndarray, sizes: np.ndarray,
                     which: Callable[[int], str], cuda_stream: int = 0) -> torch.Tensor:
        """JPEG files `samples` (1-D uint8 arrays, e.g. views of a pinned slot), stored at `sizes` (B, 2) (height,
        width, from the table), cut to `boxes` (B, 4) -> uint8 canvas (B, max box height, max box width, C) on the
        device, crop k in canvas[k, :boxes[k, 2], :boxes[k, 3]]. One decoder call; `which(k)` names sample k in
        errors. The canvas is written on `cuda_stream` (a `torch.cuda.Stream.cuda_stream`; 0 off CUDA)."""
        codec = self.codec
        boxes = np.asarray(boxes, np.int64)
        canvas = torch.empty((len(samples), int(boxes[:, 2].max()), int(boxes[:, 3].max()), self.channels),
                             dtype=torch.uint8, device=self.device)
        sources, targets = [], []
        for k, data in enumerate(samples):
            sources.append(self._region_stream(data, boxes[k], sizes[k], which, k))
            view = canvas[k, :int(boxes[k, 2]), :int(boxes[k, 3])]
            target = view.numpy() if view.device.type == "cpu" else view  # host views through numpy
            targets.append(codec.as_image(target, cuda_stream=cuda_stream))
        images = self.decoder.decode(sources, images=targets, params=self.params, cuda_stream=cuda_stream)
        for k, image in enumerate(images):
            if image is None:
                raise FormatError(f"{which(k)} does not decode as JPEG with nvImageCodec (it returned no image); "
                                  f"the file or its source image is damaged: re-run gpufeed pack")
            if image is not targets[k]:  # the decoder allocated its own buffer: copy it into the slot
                canvas[k, :int(boxes[k, 2]), :int(boxes[k, 3])].copy_(torch.from_dlpack(image))
        return canvas

    def _region_stream(self, data: np.ndarray, box, size, which: Callable[[int], str], k: int):
        codec = self.codec
        try:
            stream = codec.CodeStream(data)
            found = (int(stream.height), int(stream.width))
        except RuntimeError as error:
            raise FormatError(f"{which(k)} does not decode as JPEG ({error}); the file or its source image is "
                              f"damaged: re-run gpufeed pack") from None
        if found != (int(size[0]), int(size[1])):
            raise FormatError(f"{which(k)} is a {found[1]}x{found[0]} JPEG but the table says {int(size[1])}x"
                              f"{int(size[0])}; re-run gpufeed pack")
        return stream.get_sub_code_stream(region=box_region(codec, box))

    def probe(self) -> None:
        """Decode a small JPEG here (region and canvas included); `DecoderUnavailable` if no decoder can."""
        rows, columns, channels = np.mgrid[0:16, 0:24, 0:self.channels]
        pixels = (rows * 12 + columns * 5 + channels * 40).astype(np.uint8)  # smooth: JPEG keeps it within a level
        colourspace = "GRAY" if self.channels == 1 else "RGB"
        data = np.frombuffer(simplejpeg.encode_jpeg(pixels, 95, colourspace), np.uint8)
        expected = simplejpeg.decode_jpeg(data.tobytes(), colourspace)[2:14, 3:23]
        try:
            canvas = self.decode_crops([data], np.array([[2, 3, 12, 20]]), np.array([[16, 24]]),
                                       lambda k: "the probe image")
        except (FormatError, RuntimeError) as error:
            detail = "it returned no image" if isinstance(error, FormatError) else str(error)
            raise DecoderUnavailable(f"nvImageCodec could not decode a test JPEG on {self.device} ({detail}; is "
                                     f"nvJPEG installed? {INSTALL_HINT} brings nvidia-nvjpeg-cu12)") from None
        found = canvas[0].cpu().numpy().astype(np.int64)
        if np.abs(found - expected).max() > PROBE_TOLERANCE:
            raise DecoderUnavailable(f"nvImageCodec decoded a test JPEG wrongly on {self.device} (off by "
                                     f"{np.abs(found - expected).max()} levels)")


def open_decoder(device: torch.device, channels: int, threads: int = 0, codec=None) -> DeviceJpegDecoder:
    """A `DeviceJpegDecoder` that has decoded a test image; `DecoderUnavailable` with the reason otherwise."""
    decoder = DeviceJpegDecoder(device, channels, threads, codec)
    decoder.probe()
    return decoder
