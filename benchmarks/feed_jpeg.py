"""Feed benchmark at real resolution: photographs decoded, cropped and resized into float batches, in one run.

    python benchmarks/feed_jpeg.py [--count 5000] [--batch-size 256] [--epochs 2] [--repeats 3]
                                   [--ffcv-python /tmp/ffcv-venv/bin/python]

The photographs: scikit-image's wheel ships nine colour photographs in `skimage/data` (astronaut, chelsea,
coffee, hubble_deep_field, ihc, motorcycle_left, motorcycle_right, retina, rocket; 300 x 451 to 1411 x 1411 px).
At benchmark time (never when the library runs) `pip download scikit-image --no-deps` fetches that wheel from
PyPI into a temporary folder, and `--count` crops are cut from the photos: each side drawn from a triangular
distribution on 250..450 px (mode 250, so the mean is about 315; capped at the photo's side), the region
taken at a random scale between "just fits" and 1 and resized to that size with LANCZOS, saved as JPEG
quality 90 (Pillow, 4:2:0), one class subfolder per photo. With the default seed: mean 317 wide x 314 high,
29.8 KB, close to the issue's anchor (314 x 311 px, about 29 KB). Everything is written under one temporary
folder, removed at the end.

Every pipeline gives batches of `--batch-size` RandomResizedCrop 224 (torchvision's rule: scale 0.08-1,
ratio 3/4-4/3) + horizontal flip, as normalised float32 (B, 3, 224, 224):
(a) a standard DataLoader, 2 workers: per sample PIL open + decode + crop box resize (BILINEAR) + flip,
    float conversion and normalisation (the box from `gpufeed.data.crops`, drawn per sample);
(b) `Feed(device="cpu", augment="random-resized-crop", image_size=224)`, 2 staging threads, from the folder
    packed with `gpufeed.pack(..., max_side=256, encoding="jpeg", quality=90)` (float32, and bfloat16 with
    `dtype=torch.bfloat16`), and from the same packed raw;
(c) the staging rate alone, the CPU's share on a GPU machine: `Feed.stage_batch`, the GPU path's staging,
    into ring slots on the CPU (uint8 crops, decoded and resized here, labels and flip coins; no float
    conversion); and the JPEG files of each batch gathered as compressed bytes into a slot with their crop
    boxes, which is all a path that decodes on the GPU leaves to the CPU;
(d) FFCV, where `--ffcv-python` names a Python with ffcv installed: its ImageNet recipe (JPEG at max side 256,
    quality 90, `RandomResizedCropRGBImageDecoder`, flip, `NormalizeImage` to float32), 2 workers, run as a
    subprocess (`feed_jpeg_ffcv.py`) after the others, on the same folder.
Prints img/s (median, min-max over the repeats), each ratio to (a), the packed file sizes, and each target:
(b) JPEG float32 at least 4.3x (a) and at least 1.5x (d) in the same run.
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import simplejpeg
import torch
from PIL import Image

from gpufeed.data.feed import crops
from gpufeed.data.feed.augment import to_float
from gpufeed.data.feed.cpu_resize import CropResizer, resize_planes
from gpufeed.data.feed.feed import Feed
from gpufeed.data.feed.staging import OutputPool, SlotPool, Staging
from gpufeed.data.format.reader import open_packed
from gpufeed.data.pack.sources import pack

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feed import rate, staging_only  # noqa: E402

PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "ihc.png", "motorcycle_left.png",
          "motorcycle_right.png", "retina.jpg", "rocket.jpg")
SIDES = (250, 450)  # triangular, mode at the low end
IMAGE_SIZE = 224
MAX_SIDE, QUALITY = 256, 90  # FFCV's ImageNet recipe: JPEG at max side 256, quality 90
WORKERS = 2
TARGETS = {"jpeg_ratio": 4.3, "ffcv_ratio": 1.5, "staging": 30_000, "file_ratio": 1.1}
ANCHOR = {"dataloader": 926, "ffcv": 3100, "ffcv_mib": 88}  # the figures on a 2-core machine of this kind


def fetch_photos(folder: Path) -> list[Image.Image]:
    """The colour photographs in scikit-image's wheel, downloaded with pip into `folder`."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "scikit-image", "-d", str(folder)], check=True)
    wheel = glob.glob(str(folder / "scikit_image-*.whl"))[0]
    with zipfile.ZipFile(wheel) as archive:
        return [Image.open(io.BytesIO(archive.read(f"skimage/data/{name}"))).convert("RGB") for name in PHOTOS]


def cut_photos(photos: list[Image.Image], count: int, folder: Path, seed: int = 0,
               quality: int = 90) -> list[tuple[str, int]]:
    """`count` JPEG crops of the photos at random sizes and scales, in one subfolder per photo."""
    rng = np.random.default_rng(seed)
    files = []
    for name in PHOTOS:
        (folder / name.split(".")[0]).mkdir(parents=True, exist_ok=True)
    for index in range(count):
        label = index % len(photos)
        photo = photos[label]
        height, width = (int(side) for side in rng.triangular(SIDES[0], SIDES[0], SIDES[1] + 1, 2))
        height, width = min(height, photo.height), min(width, photo.width)
        smallest = max(height / photo.height, width / photo.width)  # the scale at which the crop just fits
        scale = float(np.exp(rng.uniform(np.log(smallest), 0.0)))
        box_height, box_width = height / scale, width / scale
        top, left = rng.uniform(0, photo.height - box_height), rng.uniform(0, photo.width - box_width)
        crop = photo.resize((width, height), Image.Resampling.LANCZOS,
                            box=(left, top, left + box_width, top + box_height))
        path = folder / PHOTOS[label].split(".")[0] / f"{index:06d}.jpg"
        crop.save(path, "JPEG", quality=quality)
        files.append((str(path), label))
    return files


class PhotoFolder(torch.utils.data.Dataset):
    """What a typical ImageNet training script does per sample, as torchvision's transforms do it: PIL decode,
    RandomResizedCrop (PIL crop box resized with BILINEAR), RandomHorizontalFlip, ToTensor (a contiguous
    (C, H, W) copy, float, / 255) and Normalize (in place). The boxes follow torchvision's rule
    (`gpufeed.data.crops`), drawn for every sample of the folder at once each time a worker has used them all,
    so that drawing costs what torchvision's scalar `get_params` does per sample, nearly nothing."""

    def __init__(self, files: list[tuple[str, int]], mean, std, size: int = IMAGE_SIZE):
        self.files, self.size = files, size
        self.mean = torch.tensor(mean, dtype=torch.float32).view(3, 1, 1) / 255
        self.std = torch.tensor(std, dtype=torch.float32).view(3, 1, 1) / 255
        sizes = np.array([Image.open(path).size for path, _ in files])  # (width, height) from each header
        self.widths, self.heights = sizes[:, 0], sizes[:, 1]
        self._boxes, self._used = None, 0

    def __len__(self) -> int:
        return len(self.files)

    def _box(self, index: int) -> np.ndarray:
        if self._boxes is None or self._used == len(self):
            uniforms = torch.rand((len(self), crops.UNIFORMS_PER_SAMPLE), dtype=torch.float64).numpy()  # per worker
            self._boxes, self._used = crops.random_resized_boxes(self.heights, self.widths, uniforms), 0
        self._used += 1
        return self._boxes[index]

    def __getitem__(self, index: int):
        path, label = self.files[index]
        with Image.open(path) as image:
            image = image.convert("RGB")
        top, left, height, width = (int(v) for v in self._box(index))
        image = image.resize((self.size, self.size), Image.Resampling.BILINEAR,
                             box=(left, top, left + width, top + height))
        if torch.rand(1).item() < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        tensor = torch.from_numpy(np.array(image, np.uint8, copy=True)).permute(2, 0, 1).contiguous()
        tensor = tensor.to(torch.float32).div(255)
        return tensor.sub_(self.mean).div_(self.std), label


def compressed_staging(feed: Feed):
    """Yield (samples, labels) per batch as the GPU-decode path stages it (`feed/gpu/byte_staging.stage_batch_bytes`:
    crop boxes, the JPEG files back to back in a byte slot, labels, flip draws), into unpinned slots on the
    staging threads: the CPU's whole share of that path."""
    from gpufeed.data.feed.gpu.byte_staging import ByteSlot, initial_capacity, stage_batch_bytes

    stop = threading.Event()
    capacity = initial_capacity(feed.dataset, feed.batch_size)
    pool = SlotPool(lambda: ByteSlot.empty(feed.batch_size, capacity, False), feed.prefetch + feed.workers, stop)
    order = feed.order()

    def prepare(index: int):
        return stage_batch_bytes(feed, order, feed.epoch, index, pool.acquire())

    for _index, slot in Staging(prepare, 0, len(order), feed.workers, feed.prefetch, stop):
        yield slot.samples[:slot.size], slot.labels[:slot.size]
        pool.release(slot)


def time_per_image(dataset, batch_size: int, repeats: int = 7) -> dict[str, float]:
    """Median microseconds an image for each stage of `Feed`'s CPU path on this thread (one intra-op thread),
    over one batch of RandomResizedCrop 224 boxes with half the samples flipped: per sample, read (its bytes
    from the payload), decode (simplejpeg into a kept buffer), resize + flip (`resize_planes` into the slot),
    each timed inside one loop; `CropResizer.stage` of the same batch, whose excess over those three is the
    Python around them; and the float conversion with normalisation into memory lent by an `OutputPool`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    samples = np.random.default_rng(0).permutation(len(dataset))[:batch_size]
    plan = crops.parse_resized_crop("random-resized-crop", IMAGE_SIZE)
    boxes = crops.batch_boxes(plan, dataset.heights[samples], dataset.widths[samples], 0, 0, 0, batch_size, 0)
    flips = np.arange(batch_size) % 2
    out = torch.empty((batch_size, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=torch.uint8)
    images, planes = out.unbind(0), out.permute(0, 3, 1, 2).unsqueeze(1).unbind(0)
    buffer = np.empty(int(dataset.heights.max() * dataset.widths.max() * 3), np.uint8)
    cropper, outputs = CropResizer(dataset), OutputPool(4)
    scale, shift = torch.ones(3), torch.zeros(3)

    def per_sample() -> np.ndarray:
        spent = np.zeros(3)
        for k, (sample, (top, left, height, width)) in enumerate(zip(samples.tolist(), boxes.tolist(), strict=True)):
            start = time.perf_counter()
            data = dataset.sample_bytes(sample)
            read = time.perf_counter()
            size = int(dataset.heights[sample]) * int(dataset.widths[sample]) * 3
            image = simplejpeg.decode_jpeg(data, "RGB", buffer=buffer[:size])
            decoded = time.perf_counter()
            crop = torch.from_numpy(image[top:top + height, left:left + width].transpose(2, 0, 1)[None])
            resize_planes(crop, images[k], planes[k], bool(flips[k]))
            spent += (read - start, decoded - read, time.perf_counter() - decoded)
        return spent

    def timed(run) -> float:
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    rows = []
    for _ in range(repeats):
        read, decode, resize = per_sample()
        stage = timed(lambda: cropper.stage(samples, boxes, out, flips))
        convert = [timed(lambda dtype=dtype: to_float(out, dtype, scale.to(dtype), shift.to(dtype), True,
                                                      outputs.take_images(batch_size, (3, IMAGE_SIZE, IMAGE_SIZE),
                                                                          dtype, True)))
                   for dtype in (torch.float32, torch.bfloat16)]
        rows.append((read, decode, resize, stage - read - decode - resize, stage, *convert))
    torch.set_num_threads(threads)
    names = ("read", "decode", "resize + flip", "Python around them", "stage (the four)",
             "convert + normalise to float32", "to bfloat16")
    return dict(zip(names, np.median(np.array(rows), axis=0) / batch_size * 1e6, strict=True))


def alternatives(dataset, batch_size: int, repeats: int = 5) -> dict[str, float]:
    """Median microseconds an image, on one thread, of the decoders and resizers the feed could use instead of its
    own (issue 21: "decode less, work less after the decode"), over one batch of RandomResizedCrop 224 boxes:
    simplejpeg's whole-image decode into a kept buffer (what the feed does at these sizes), nvImageCodec's CPU
    backend decoding only the box (libjpeg-turbo's skipped and cropped scanlines) into a kept buffer, OpenCV's
    `imdecode`; and the crop's resize by torch's antialiased bilinear (the feed's), OpenCV's INTER_LINEAR (no
    antialiasing when shrinking) and INTER_AREA, and pyvips' linear `resize`. Each not importable is left out."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    samples = np.random.default_rng(1).permutation(len(dataset))[:batch_size]
    plan = crops.parse_resized_crop("random-resized-crop", IMAGE_SIZE)
    boxes = crops.batch_boxes(plan, dataset.heights[samples], dataset.widths[samples], 0, 0, 1, batch_size, 0)
    data = [np.asarray(dataset.sample_bytes(int(sample))) for sample in samples]
    crops_ = [simplejpeg.decode_jpeg(item, "RGB")[t:t + h, l:l + w]
              for item, (t, l, h, w) in zip(data, boxes.tolist(), strict=True)]
    out = np.empty((IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    canvas = np.empty((int(dataset.heights.max()), int(dataset.widths.max()), 3), np.uint8)
    whole = canvas.reshape(-1)
    sizes = (dataset.heights[samples] * dataset.widths[samples] * 3).tolist()
    ways = {"decode whole (simplejpeg)": lambda: [simplejpeg.decode_jpeg(item, "RGB", buffer=whole[:size])
                                                  for item, size in zip(data, sizes, strict=True)]}
    try:
        from gpufeed.data.feed.gpu.decoder import CPU_ONLY_DEVICE_ID, load_nvimgcodec
        codec = load_nvimgcodec()
        decoder = codec.Decoder(device_id=CPU_ONLY_DEVICE_ID, max_num_cpu_threads=1,
                                backends=[codec.Backend(codec.BackendKind.CPU_ONLY)])
        params = codec.DecodeParams(apply_exif_orientation=False, color_spec=codec.ColorSpec.SRGB)

        def region() -> None:
            for item, (t, l, h, w) in zip(data, boxes.tolist(), strict=True):
                stream = codec.CodeStream(item).get_sub_code_stream(region=codec.Region(t, l, t + h, l + w))
                decoder.decode([stream], images=[codec.as_image(canvas[:h, :w])], params=params)
        ways["decode the box only (nvImageCodec CPU)"] = region
    except Exception as error:  # noqa: BLE001 - reported, never fatal to the benchmark
        print(f"  nvImageCodec region decode: NA ({error})")
    target = torch.from_numpy(out)
    planes = target.permute(2, 0, 1)[None]
    ways["resize (torch antialiased bilinear)"] = lambda: [resize_planes(
        torch.from_numpy(crop.transpose(2, 0, 1)[None]), target, planes, False) for crop in crops_]
    try:
        import cv2
        cv2.setNumThreads(1)
        ways["decode whole (OpenCV imdecode)"] = lambda: [cv2.imdecode(item, cv2.IMREAD_COLOR) for item in data]
        for name, flag in (("INTER_LINEAR", cv2.INTER_LINEAR), ("INTER_AREA", cv2.INTER_AREA)):
            ways[f"resize (OpenCV {name})"] = lambda flag=flag: [
                cv2.resize(crop, (IMAGE_SIZE, IMAGE_SIZE), dst=out, interpolation=flag) for crop in crops_]
    except ImportError as error:
        print(f"  OpenCV: NA ({error})")
    try:
        import pyvips

        def vips() -> None:
            for crop in crops_:
                crop = np.ascontiguousarray(crop)
                image = pyvips.Image.new_from_memory(crop.data, crop.shape[1], crop.shape[0], 3, "uchar")
                image.resize(IMAGE_SIZE / crop.shape[1], vscale=IMAGE_SIZE / crop.shape[0],
                             kernel="linear").write_to_memory()
        ways["resize (pyvips linear)"] = vips
    except (ImportError, OSError) as error:
        print(f"  pyvips: NA ({error})")
    timings = {name: [] for name in ways}
    for _ in range(repeats):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            timings[name].append((time.perf_counter() - start) / batch_size * 1e6)
    torch.set_num_threads(threads)
    return {name: statistics.median(values) for name, values in timings.items()}


def summarise(name: str, rates: list[float]) -> float:
    median = statistics.median(rates)
    print(f"  {name:<62} {median:>9,.0f} img/s  ({min(rates):,.0f} - {max(rates):,.0f})", flush=True)
    return median


def run_ffcv(python: str, folder: Path, destination: Path, args) -> dict:
    """FFCV's figures from `feed_jpeg_ffcv.py` run by `python`, or {"reason": ...} when it cannot run."""
    script = Path(__file__).resolve().parent / "feed_jpeg_ffcv.py"
    command = [python, str(script), str(folder), str(destination), "--batch-size", str(args.batch_size),
               "--epochs", str(args.epochs), "--repeats", str(args.repeats), "--workers", str(WORKERS),
               "--max-side", str(MAX_SIDE), "--quality", str(QUALITY)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as error:
        return {"reason": f"{python} did not run: {error}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"reason": f"feed_jpeg_ffcv.py exited {done.returncode}: {tail}"}
    return json.loads(lines[-1])


def verdict(value: float, target: float, higher: bool = True) -> str:
    met = value >= target if higher else value <= target
    return "met" if met else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ffcv-python", default="/tmp/ffcv-venv/bin/python",
                        help="a Python with ffcv installed (skipped with a reason when it has none)")
    args = parser.parse_args()
    print(f"feed_jpeg benchmark: {args.count} photo crops, batch {args.batch_size}, RandomResizedCrop "
          f"{IMAGE_SIZE} + flip, float32 (and bfloat16); {args.epochs} epochs x {args.repeats} repeats; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"numpy {np.__version__}, simplejpeg {simplejpeg.__version__}, Pillow {Image.__version__}, "
          f"python {platform.python_version()}; load average {os.getloadavg()[0]:.2f} before the run", flush=True)
    with tempfile.TemporaryDirectory(prefix="feed_jpeg-") as temporary:
        temporary = Path(temporary)
        photos = fetch_photos(temporary / "wheel")
        folder = temporary / "photos"
        files = cut_photos(photos, args.count, folder)
        sizes = np.array([Image.open(path).size for path, _ in files])
        kilobytes = np.mean([os.path.getsize(path) for path, _ in files]) / 1000
        print(f"  cut {len(files)} JPEGs from {len(PHOTOS)} photographs: mean {sizes[:, 0].mean():.0f} wide x "
              f"{sizes[:, 1].mean():.0f} high, {kilobytes:.1f} KB", flush=True)
        packed = {}
        for encoding in ("jpeg", "raw"):
            path = temporary / f"photos-{encoding}.gpuf"
            result = pack(folder, path, max_side=MAX_SIDE, encoding=encoding,
                          quality=QUALITY if encoding == "jpeg" else None, workers=WORKERS)
            packed[encoding] = open_packed(path)
            print(f"  packed {encoding} at max side {MAX_SIDE}: {result.bytes_written / 2**20:.1f} MiB in "
                  f"{result.seconds:.1f} s", flush=True)
        results = measure(args, files, packed)
        ffcv = run_ffcv(args.ffcv_python, folder, temporary / "photos.beton", args)
    report(args, results, packed, ffcv)


def warmed(iterate, batches: int = 2):
    """`iterate` after a first pass over `batches` batches (workers started, buffers made), for `rate`."""
    iterator = iter(iterate())
    for _ in range(batches):
        next(iterator, None)
    if hasattr(iterator, "close"):
        iterator.close()
    return iterate


def measure(args, files, packed) -> dict[str, float | None]:
    """img/s medians of (a), (b) and (c), printed as they come; None (with the reason printed) when one cannot
    be measured."""
    jpeg = packed["jpeg"]
    results: dict[str, float | None] = {}
    repeat = range(args.repeats)
    loader = torch.utils.data.DataLoader(PhotoFolder(files, jpeg.mean, jpeg.std), batch_size=args.batch_size,
                                         shuffle=True, num_workers=WORKERS, drop_last=True,
                                         persistent_workers=True)
    iterate = warmed(lambda loader=loader: loader)
    results["a"] = summarise(f"(a) DataLoader + PIL, num_workers={WORKERS}",
                             [rate(iterate, args.epochs) for _ in repeat])
    del loader, iterate  # its worker processes end here, before the next pipeline
    options = dict(device="cpu", augment="random-resized-crop", image_size=IMAGE_SIZE)
    for encoding, workers, dtype in (("jpeg", WORKERS, torch.float32), ("jpeg", WORKERS, torch.bfloat16),
                                     ("raw", WORKERS, torch.float32), ("jpeg", 1, torch.float32)):
        feed = Feed(packed[encoding], args.batch_size, workers=workers, dtype=dtype, **options)
        iterate = warmed(lambda feed=feed: feed)
        type_name = str(dtype).removeprefix("torch.")
        name = f"b_{encoding}" + ("" if workers == WORKERS else f"_{workers}") + \
            ("" if dtype == torch.float32 else f"_{type_name}")
        results[name] = summarise(f"(b) Feed(device='cpu'), {encoding} pack, {type_name}, {workers} staging "
                                  f"thread{'s' if workers > 1 else ''}", [rate(iterate, args.epochs) for _ in repeat])
    feed = Feed(jpeg, args.batch_size, workers=WORKERS, **options)
    results["c_uint8"] = summarise("(c) staging alone: uint8 crops decoded here (Feed.stage_batch)",
                                   [rate(lambda: staging_only(feed), args.epochs) for _ in repeat])
    try:
        rates = [rate(lambda: compressed_staging(feed), args.epochs) for _ in repeat]
        results["c_bytes"] = summarise("(c) staging alone: compressed bytes + boxes (GPU decode path)", rates)
    except ImportError as error:
        print(f"  (c) staging alone, compressed bytes: NA ({error}: no GPU-decode path in this gpufeed)")
        results["c_bytes"] = None
    breakdown = time_per_image(jpeg, args.batch_size)
    print("  time per image on one thread, us (median of 7 batches of 256): " +
          ", ".join(f"{name} {value:.0f}" for name, value in breakdown.items()), flush=True)
    print(f"  alternatives, us an image on one thread (median of 5 batches of {args.batch_size}): " +
          ", ".join(f"{name} {value:.0f}" for name, value in alternatives(jpeg, args.batch_size).items()), flush=True)
    return results


def report(args, results: dict[str, float], packed, ffcv: dict) -> None:
    baseline = results["a"]
    print("  ratios to (a): " + ", ".join(f"{key} {value / baseline:.2f}x" for key, value in results.items()
                                          if key != "a" and value is not None))
    jpeg_mib = packed["jpeg"].header.file_bytes / 2**20
    if "rate" in ffcv:
        print(f"  (d) FFCV {ffcv['version']}, ImageNet recipe, {WORKERS} workers: {ffcv['rate']:,.0f} img/s "
              f"({min(ffcv['rates']):,.0f} - {max(ffcv['rates']):,.0f}), {ffcv['rate'] / baseline:.2f}x (a); "
              f"file {ffcv['file_bytes'] / 2**20:.1f} MiB (written in {ffcv['write_s']:.1f} s)")
        ffcv_ratio, ffcv_mib, source = ffcv["rate"] / baseline, ffcv["file_bytes"] / 2**20, "this run"
    else:
        print(f"  (d) FFCV not run: {ffcv['reason']}")
        ffcv_ratio, ffcv_mib = ANCHOR["ffcv"] / ANCHOR["dataloader"], ANCHOR["ffcv_mib"] * args.count / 5000
        source = "the issue's anchor"
    jpeg_ratio = results["b_jpeg"] / baseline
    print(f"  target: Feed jpeg >= {TARGETS['jpeg_ratio']}x (a): {jpeg_ratio:.2f}x, "
          f"{verdict(jpeg_ratio, TARGETS['jpeg_ratio'])} ({jpeg_ratio / ffcv_ratio:.2f}x FFCV's ratio of "
          f"{ffcv_ratio:.2f}, {source})")
    if "rate" in ffcv:
        against = results["b_jpeg"] / ffcv["rate"]
        print(f"  target: Feed jpeg float32 >= {TARGETS['ffcv_ratio']}x FFCV's rate (same run): {against:.2f}x, "
              f"{verdict(against, TARGETS['ffcv_ratio'])}; bfloat16 {results['b_jpeg_bfloat16'] / ffcv['rate']:.2f}x")
    else:
        print(f"  target: Feed jpeg >= {TARGETS['ffcv_ratio']}x FFCV's rate: NA (FFCV not run here)")
    compressed = "NA" if results["c_bytes"] is None else \
        f"{results['c_bytes']:,.0f} ({verdict(results['c_bytes'], TARGETS['staging'])})"
    print(f"  target: staging >= {TARGETS['staging']:,} img/s: uint8 crops {results['c_uint8']:,.0f} "
          f"({verdict(results['c_uint8'], TARGETS['staging'])}), compressed bytes {compressed}")
    print(f"  target: packed file <= {TARGETS['file_ratio']}x FFCV's: {jpeg_mib:.1f} MiB / {ffcv_mib:.1f} MiB = "
          f"{jpeg_mib / ffcv_mib:.2f}x, {verdict(jpeg_mib / ffcv_mib, TARGETS['file_ratio'], higher=False)} "
          f"({source}); raw pack {packed['raw'].header.file_bytes / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
