#!/usr/bin/env bash
# The GPU checks, as one prepared script for a lent GPU machine (the `device` tool); under 8 minutes.
# Results go under $OUT. Run from the repository root:   bash benchmarks/device_check.sh
# The machine's python3 already has torch (CUDA), numpy, psutil, rich, pillow, safetensors, nvidia-ml-py, pytest;
# gpufeed runs from the source tree.
set -u
OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export GPUFEED_CACHE="$OUT/cache"
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }
{
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,power.limit --format=csv
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
  python3 -m gpufeed info --json "$OUT/info.json" > /dev/null && echo "info written"

  step "GPU tests (the CUDA paths of the feed and the trainer)"
  timeout 150 python3 -m pytest -q -x -p no:cacheprovider -k "cuda or gpu" tests/ 2>&1 | tail -15

  step "train: the default CNN on the GPU, 5 epochs"
  timeout 120 python3 -m gpufeed train --json "$OUT/train_cnn.json" | tail -6

  step "train: resnet18, 1 epoch, device busy share"
  timeout 90 python3 -m gpufeed train --model resnet18 --epochs 1 --json "$OUT/train_resnet18.json" | tail -6

  step "feed on the GPU: staging, ring, resident, busy share, upper bound"
  timeout 100 python3 benchmarks/feed_gpu.py --repeats 3 | tee "$OUT/feed_gpu.txt"

  step "bench --quick"
  timeout 150 python3 -m gpufeed bench --quick --json "$OUT/bench.json" | tail -30
} 2>&1 | tee "$OUT/device_check.log"
