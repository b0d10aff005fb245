#!/usr/bin/env bash
# The GPU checks, as one prepared script for a lent GPU machine (the `device` tool); under 8 minutes.
# Results go under $OUT. Run from the repository root:   bash benchmarks/device_check.sh
# The machine's python3 already has torch (CUDA), numpy, psutil, rich, pillow, safetensors, nvidia-ml-py, pytest;
# gpufeed runs from the source tree.
#
# Wheels: the machine has no network, so the GPU JPEG decode (nvImageCodec) and simplejpeg (the CPU JPEG path, if
# the machine's python3 lacks it) come as wheels carried in the tree, from shared/wheels/ or $GPUFEED_WHEELS. Before
# a device run, on a machine with network (the wheels must not be committed: shared/wheels/ is git-ignored):
#   pip download nvidia-nvimgcodec-cu12 nvidia-nvjpeg-cu12 --no-deps -d shared/wheels       # 32 MB + 5 MB
#   for v in 3.10 3.11 3.12 3.13; do pip download simplejpeg --no-deps --only-binary=:all: --python-version $v \
#     --platform manylinux2014_x86_64 -d shared/wheels; done                                # 0.4 MB each
# For the language-model plan's check, transformers and peft with their dependencies but not torch, numpy or
# CUDA's (the machine's own), for the machine's python3 (see its version in the "machine" step):
#   pip download transformers==5.24.0 peft==0.21.2 --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d shared/wheels/lm && rm -f shared/wheels/lm/{torch,numpy,nvidia,triton}*
# then run with carry=["shared/wheels"]. Without them the GPU-decode and language-model steps say so and are skipped.
#
# Time: each step's estimate (one H200, 16 cores) is in its comment, about 460 s in all before the language-model
# step (about 60 s more, last: it runs in what is left of the budget). Each step also has a limit, and `within`
# cuts any limit to what is left of BUDGET_S (470 s) since the start, and skips a step when under 10 s are left, so
# the whole script ends before 8 minutes even when steps run long.
#
# Exit status: 1 when a test step (pytest) failed, timed out or was skipped for want of time, after every step has
# run, so the other figures still come back; the log ends with the test steps' statuses. 0 otherwise.
set -u -o pipefail  # a piped step's status is its command's (pytest's), not that of the `tail` it is piped into
OUT=${OUT:-$(mktemp -d)}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export GPUFEED_CACHE="$OUT/cache"
START_S=$(date +%s)
BUDGET_S=${BUDGET_S:-470}
step() { echo; echo "== $(date -u +%H:%M:%S) (+$(( $(date +%s) - START_S )) s) $*"; }
within() {  # within LIMIT COMMAND...: COMMAND under timeout, LIMIT seconds or what is left of the budget if less
  local limit=$1 left
  shift
  left=$(( BUDGET_S - ($(date +%s) - START_S) ))
  (( left < limit )) && limit=$left
  if (( limit < 10 )); then
    echo "skipped, the 8-minute budget is spent: $*"
    return 124
  fi
  timeout "$limit" "$@"
}
FAILED_STEPS=()
record_tests() {  # record_tests NAME STATUS: say how a pytest step ended; remember a failure for the exit status
  local why="a test failed"
  case $2 in
    0) echo "$1: passed"; return ;;
    124) why="timed out, or skipped for want of time" ;;
    5) why="no test was collected" ;;
    2|3|4) why="pytest was interrupted or could not run" ;;
  esac
  echo "$1: FAILED (exit status $2: $why)"
  FAILED_STEPS+=("$1")
}
{
  step "machine"  # est 10 s
  nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current,power.limit --format=csv
  python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
  python3 -m gpufeed info --json "$OUT/info.json" > /dev/null && echo "info written"

  step "wheels: nvImageCodec and nvJPEG (GPU JPEG decode), simplejpeg if missing, carried in"  # est 10 s
  WHEELS=${GPUFEED_WHEELS:-$PWD/shared/wheels}
  if ls "$WHEELS"/nvidia_nvimgcodec_cu*.whl > /dev/null 2>&1; then
    wanted="nvidia-nvimgcodec-cu12 nvidia-nvjpeg-cu12"
    python3 -c "import simplejpeg" 2> /dev/null || wanted="$wanted simplejpeg"
    within 60 python3 -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" --target "$OUT/wheels" \
      $wanted && export PYTHONPATH="$PYTHONPATH:$OUT/wheels" && echo "installed into \$OUT/wheels: $wanted"
  else
    echo "no nvImageCodec wheel in $WHEELS: the GPU-decode tests skip and its timing is not measured (see the header)"
  fi
  if ls "$WHEELS"/lm/transformers-*.whl > /dev/null 2>&1 && ! python3 -c "import transformers, peft" 2> /dev/null; then
    within 60 python3 -m pip install --quiet --no-index --no-deps --target "$OUT/lm_wheels" "$WHEELS"/lm/*.whl \
      && export PYTHONPATH="$PYTHONPATH:$OUT/lm_wheels" && echo "installed into \$OUT/lm_wheels: transformers, peft"
  fi

  # est 70 s; "cuda" in a test's id selects the CUDA variants of tests that also run on the CPU (the transfer ring
  # and the resident data: tests/data/feed/test_transfer_ring.py, test_resident_data.py)
  step "GPU tests (the CUDA paths of the feed and the trainer)"
  within 150 python3 -m pytest -q -x -p no:cacheprovider -k "cuda or gpu" --ignore=tests/doctor/test_gpu_scripts.py \
    tests/ 2>&1 | tail -15
  record_tests "GPU tests" $?

  step "doctor: the GPU bottleneck scripts' tests (verdicts and key findings)"  # est 40 s: 4 tests of 5-10 s
  within 90 python3 -m pytest -q -p no:cacheprovider -rs tests/doctor/test_gpu_scripts.py 2>&1 | tail -25
  record_tests "doctor GPU script tests" $?

  # est 70 s: item_sync 5 runs (async_item), tiny_kernels 3 runs (double_batch finds no DataLoader),
  # pageable_copy 5 (pin_memory), cpu_augment 9 (replay, workers); 35 steps a run, 5-50 ms a step
  step "doctor --try --repeats 2 on each GPU script (verdicts, findings, measured gains)"
  for script in tests/doctor/scripts/gpu_*.py; do
    name=$(basename "$script" .py)
    within 60 python3 -m gpufeed doctor --steps 30 --warmup 5 --try --repeats 2 --json "$OUT/doctor_$name.json" \
      "$script" > "$OUT/doctor_$name.txt" 2>&1
    echo "$name: exit status $? (report: doctor_$name.txt, doctor_$name.json)"
  done
  python3 - "$OUT"/doctor_gpu_*.json <<'EOF'
import json
import sys
from pathlib import Path

for path in sys.argv[1:]:
    name = Path(path).stem.removeprefix("doctor_")
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        print(f"{name}: no report ({error})")
        continue
    verdict = document["verdict"]
    busy, wait = verdict.get("device_busy"), verdict.get("data_wait")
    print(f"{name}: {verdict['primary']} ({verdict['steps']} steps on {verdict['device']}, device busy "
          f"{'NA' if busy is None else f'{busy:.0%}'}, data wait {'NA' if wait is None else f'{wait:.0%}'})")
    for finding in document["findings"]:
        gain = finding.get("gain")
        print(f"    {finding['kind']} {finding['severity']} share {finding['share']:.0%}"
              + (f"; verified {gain['measured']:.2f}x: {gain['how']}" if gain else ""))
    for line in document["unmeasured"]:
        if line.startswith(("verified fix", "watch incomplete", "operators and kernel launches")):
            print(f"    not measured: {line}")
EOF

  step "doctor overhead on the GPU: bare vs with the doctor's hooks (copies and syncs hooked too)"  # est 25 s
  within 60 python3 benchmarks/doctor_overhead.py --device cuda --steps 40 --repeats 5 | tee "$OUT/doctor_overhead.txt"

  step "train: the default CNN on the GPU, 5 epochs"  # est 50 s (building the dataset's cache included)
  within 120 python3 -m gpufeed train --json "$OUT/train_cnn.json" | tail -6

  step "train: resnet18, 1 epoch, device busy share"  # est 40 s
  within 90 python3 -m gpufeed train --model resnet18 --epochs 1 --json "$OUT/train_resnet18.json" | tail -6

  step "feed on the GPU: staging, ring, resident, busy share, upper bound"  # est 60 s
  within 100 python3 benchmarks/feed_gpu.py --repeats 3 | tee "$OUT/feed_gpu.txt"

  step "GPU JPEG decode: Feed(decode='gpu') vs decode='cpu', 2000 JPEGs of ~300 px, one batch compared"  # est 40 s
  if python3 -c "from nvidia import nvimgcodec" 2> /dev/null; then
    within 120 python3 benchmarks/gpu_decode.py --count 2000 --repeats 3 --json "$OUT/gpu_decode.json" \
      2>&1 | tee "$OUT/gpu_decode.txt"
  else
    echo "skipped: nvImageCodec is not importable (no wheels carried; see the header)"
  fi

  step "bench --quick"  # est 60 s (27 s on a 2-core CPU without a GPU)
  within 150 python3 -m gpufeed bench --quick --json "$OUT/bench.json" | tail -30

  step "plan --check on the GPU: the shared training step, plain and accumulating"  # est 40 s
  within 60 python3 -m gpufeed plan --model resnet18 --input 3x64x64 --batch-size 128 --check --json "$OUT/plan_check.json" | tail -4
  within 60 python3 -m gpufeed plan --model resnet18 --input 3x64x64 --batch-size 64 --grad-accumulation 2 --check --json "$OUT/plan_check_accumulating.json" | tail -4

  # est 60 s: GPT-2 drops attention probabilities, so this checks plan/language/fused_attention.py's claim that CUDA's fused
  # sdpa holds no scores (planned 4.5 GiB of activations at 4 x 1,024 where the CPU's math path would hold 11.4)
  step "language-model plan on the GPU: GPT-2 --check, and the small transformers against max_memory_allocated"
  if python3 -c "import transformers, peft" 2> /dev/null; then
    within 90 python3 -m gpufeed plan --model gpt2 --seq-len 1024 --batch-size 4 --check \
      --json "$OUT/plan_check_gpt2.json" | tail -4
    within 120 python3 benchmarks/plan_accuracy.py --device cuda --only language | tee "$OUT/plan_accuracy_lm.txt"
  else
    echo "skipped: transformers and peft are not importable (no wheels carried; see the header)"
  fi

  step "done"
  if (( ${#FAILED_STEPS[@]} )); then
    printf 'test step failed: %s\n' "${FAILED_STEPS[@]}"
    exit 1  # the block's status; pipefail makes it the pipeline's, and so the script's
  fi
  echo "test steps: all passed"
} 2>&1 | tee "$OUT/device_check.log"
