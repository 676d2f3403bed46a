#!/usr/bin/env bash
# The GPU speed check (static KV cache, CUDA graphs, compiled steps):
# 1. tests/test_static_cache.py on CUDA: the static cache, its CUDA-graph step (frameworks and onnxrt) and the
#    torch.compile'd graph step give the same tokens as the plain path (fp32, every decoder family, greedy/beam,
#    padded batches, EOS, buffer and graph reuse);
# 2. tools/bench/speed_matrix.py: the fp16 benchmark matrix -> $OUT/speed-GROUP.json, .md, per-token plots;
# 3. TensorRT static-cache engine builds and where ONNX Runtime places the exported GPT-2 graphs' nodes (Memcpy
#    nodes would rule out its CUDA graphs).
#
#   bash tools/bench/speed_check.sh [all|gpt2|xl|quick|autotune]   # any CUDA machine with the requirements plus
#                                                                  # onnxruntime-gpu (and TensorRT for the builds)
# all: everything (about 15 minutes on an H200); gpt2: the tests, GPT-2 124M shapes at batch 1 and 8, the
# families' offline defaults and the TensorRT builds; xl: gpt2-xl shapes; quick: GPT-2 124M at batch 1 only.
# autotune: frameworks alone (no onnxruntime-gpu needed), ~6 minutes: compiled vs --compile-mode max-autotune,
# the captured step's GPU time and kernels, the token check, the families' offline defaults; speed_matrix.py's
# docstring lists its jobs. Shapes models are made once in $SHAPES (default temp/shapes).
set -uo pipefail
. "$(dirname "$0")/common.sh"
GROUP=${1:-all}
{
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
make_shapes gpt2
case $GROUP in all|xl) make_shapes gpt2-xl;; esac
case $GROUP in all|gpt2|quick)
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_static_cache.py 2>&1 | tail -15;; esac
python3 tools/bench/speed_matrix.py "$OUT" --group "$GROUP" --workdir /tmp/wd --shapes-dir "$SHAPES"
case $GROUP in autotune)  # transformers 5.17 cannot capture GPT-J's and BLOOM's eager step: the one-line refusal
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_static_cache.py \
    -k "frameworks and graph and not compile and (gptj or bloom)" 2>&1 | tail -6;; esac
case $GROUP in all|gpt2)
  for cache in --use-cache "--use-cache --static-cache"; do  # engine builds only: TensorRT-RTX cannot run on Hopper
    python3 run.py build GPT2 trt --torch-dir $SHAPES/gpt2 --device cuda --fp16 $cache \
      --input-profile-max-len 128 --output-profile-max-len 256 -wd /tmp/wd 2>&1 | tail -6
  done
  for f in /tmp/wd/GPT2/*/decoder-fp16-*/model.onnx; do python3 tools/bench/ort_placement.py "$f" 2>&1 | grep -v scatter_nd; done;; esac
} 2>&1 | tee "$OUT/speed-$GROUP.log"
