#!/usr/bin/env bash
# The GPU speed check (static KV cache, CUDA graphs), in ONE device call once the packages from
# ../shared/device/stage.sh (+ tools/device/resplit.sh) are installed in /tmp/site:
#
#   bash tools/bench/speed_check.sh    # any CUDA machine with the requirements plus onnxruntime-gpu and TensorRT or TensorRT-RTX
# or, in this workplace (packages staged by ../shared/device/stage.sh), through the device tool:
#   run(command='sh .device/part-08/install.sh && bash tools/bench/speed_check.sh', carry=['.device/part-08', '.whl'])
#
# 1. tests/test_static_cache.py on CUDA: the static cache, its CUDA-graph step (frameworks and onnxrt) and the
#    torch.compile'd graph step give the same tokens as the plain path (fp32, every decoder family, greedy/beam,
#    padded batches, EOS, buffer and graph reuse).
# 2. tools/bench/speed_matrix.py: the fp16 benchmark matrix -> $OUT/speed.json, speed.md, per-token plots.
# 3. where ONNX Runtime places the exported GPT-2 graphs' nodes (Memcpy nodes would rule out its CUDA graphs).
#
#   bash tools/bench/speed_check.sh [all|gpt2|xl|quick|autotune]
# all: everything (about 15 minutes on an H200: more than the device tool's 10-minute call, so there it runs
# as `gpt2` (tests, GPT-2 124M at batch 1 and 8, the families' offline defaults, TensorRT static-cache builds)
# and then `xl` (gpt2-xl shapes) on the same warm machine); quick: GPT-2 124M at batch 1 only.
# autotune: frameworks alone, so it needs no staged packages (the image's torch and transformers), ~6 minutes:
#   run(command='bash tools/bench/speed_check.sh autotune', kind='nvidia-h200', timeout_s=450)
# compiled vs --compile-mode max-autotune, the captured step's GPU time and kernels, the token check, the
# families' offline defaults; speed_matrix.py's docstring lists its jobs.
set -uo pipefail
. "$(dirname "$0")/env.sh"
GROUP=${1:-all}
{
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
python3 tools/assets/make_shapes_model.py gpt2 /tmp/shapes/gpt2 >/dev/null 2>&1
case $GROUP in all|xl) python3 tools/assets/make_shapes_model.py gpt2-xl /tmp/shapes/gpt2-xl >/dev/null 2>&1;; esac
case $GROUP in all|gpt2|quick)
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_static_cache.py 2>&1 | tail -15;; esac
python3 tools/bench/speed_matrix.py "$OUT" --group "$GROUP" --workdir /tmp/wd
case $GROUP in autotune)  # transformers 5.17 cannot capture GPT-J's and BLOOM's eager step: the one-line refusal
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_static_cache.py \
    -k "frameworks and graph and not compile and (gptj or bloom)" 2>&1 | tail -6;; esac
case $GROUP in all|gpt2)
  for cache in --use-cache "--use-cache --static-cache"; do  # engine builds only: TensorRT-RTX cannot run on Hopper
    python3 run.py run GPT2 trt --build-only --torch-dir /tmp/shapes/gpt2 --device cuda --fp16 $cache \
      --input-profile-max-len 128 --output-profile-max-len 256 -wd /tmp/wd 2>&1 | tail -6
  done
  for f in /tmp/wd/GPT2/*/decoder-fp16-*/model.onnx; do python3 tools/bench/ort_placement.py "$f" 2>&1 | grep -v scatter_nd; done;; esac
} 2>&1 | tee "$OUT/speed-$GROUP.log"
rmdir "$OUT/builds" 2>/dev/null || true
