"""Accuracy of `gpufeed train` on a folder of real photographs, through the ImageNet-style commands.

    python benchmarks/photo_accuracy.py [--count 4000] [--image-size 64] [--epochs 4] [--model cnn]

The photographs are those of `feed_jpeg.py`: scikit-image's wheel, fetched with pip at benchmark time (never
when the library runs), cut into JPEG crops of 250-450 px at random scales, one class per source photograph
(9 classes). Training and validation are separate crops (different seeds) of the same photographs, so the task
is to tell which photograph a random crop comes from: a small, real-photo task a CPU can train in minutes, not
an ImageNet figure. Then, exactly as README says:

    gpufeed pack train/ train.gpuf --max-side 256 ; gpufeed pack val/ val.gpuf --max-side 256
    gpufeed train --data train.gpuf --val val.gpuf --model M --image-size N --json result.json

and prints the validation accuracy (centre crops), chance (1/9), the steps and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from feed_jpeg import PHOTOS, cut_photos, fetch_photos  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=4000, help="training crops (validation: a quarter as many)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    gpufeed = [sys.executable, "-m", "gpufeed"]
    with tempfile.TemporaryDirectory(prefix="gpufeed-photo-accuracy-") as scratch:
        folder = Path(scratch)
        photos = fetch_photos(folder / "wheel")
        cut_photos(photos, args.count, folder / "train", seed=1)
        cut_photos(photos, args.count // 4, folder / "val", seed=2)
        for split in ("train", "val"):
            subprocess.run([*gpufeed, "pack", str(folder / split), str(folder / f"{split}.gpuf"), "--max-side",
                            "256"], check=True, stdout=subprocess.DEVNULL)
        started = time.perf_counter()
        subprocess.run([*gpufeed, "train", "--data", str(folder / "train.gpuf"), "--val", str(folder / "val.gpuf"),
                        "--model", args.model, "--image-size", str(args.image_size), "--epochs", str(args.epochs),
                        "--batch-size", str(args.batch_size), "--json", str(folder / "result.json")], check=True)
        seconds = time.perf_counter() - started
        result = json.loads((folder / "result.json").read_text())
    print(f"conditions: {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}, python {platform.python_version()}; "
          f"{args.count} training and {args.count // 4} validation crops of {len(PHOTOS)} scikit-image photographs")
    print(f"{args.model} at --image-size {args.image_size}, {args.epochs} epochs, batch {result['batch_size']}, "
          f"{result['precision']} on {result['device']}: validation accuracy {result['validation_accuracy']:.2%} "
          f"(chance {1 / len(PHOTOS):.1%}) after {result['steps']} steps, {seconds:.0f} s in all "
          f"({result['samples_per_s']:,.0f} samples/s, data wait {result['data_wait_fraction']:.0%})")


if __name__ == "__main__":
    main()
