#!/usr/bin/env bash
# The core-contracts refactor on a GPU machine, in ONE call: the generation-config semantics, HF logits
# processors and onnx_ir pass under that machine's library versions (the device image: torch 2.11,
# transformers 5.17), frameworks parity with HF generate on CUDA, and TensorRT engine builds through the
# refactored trt backend (task-bound Backend, ModelDims positions, effective beams) from ONNX files exported on
# the CPU and given with --*-onnx (so neither onnxruntime-gpu nor an export on the GPU is needed).
#
#   bash tools/device/contracts_check.sh [ONNX_DIR]   # any CUDA machine with the requirements plus TensorRT or
#                                                     # TensorRT-RTX; ONNX_DIR (default .devonnx) from
#                                                     # tools/device/export_offline_onnx.sh on any machine
# or, in this workplace (TensorRT-RTX wheels split into .devrtx/part-NN, each installed by one earlier call; see
# docs/VERIFICATION.md, "Core contracts"):
#   run(command='sh .devrtx/part-03/install.sh && bash tools/device/contracts_check.sh', carry=['.devrtx/part-03',
#       '.whl', '.devonnx'])
set -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
ONNX=${1:-.devonnx}
LOG="$OUT/contracts_check.log"
{
  python3 -c "import torch, transformers, onnx, onnx_ir, onnxruntime as ort; print('torch', torch.__version__,
'transformers', transformers.__version__, 'onnx', onnx.__version__, 'onnx_ir', onnx_ir.__version__, 'onnxruntime',
ort.__version__, torch.cuda.get_device_name())"
  python3 -c "from onnx_ir.passes.common import DeduplicateHashedInitializersPass; print('onnx_ir hashed pass: ok')"
  echo "== 1. processors, generation-config semantics, contracts against this transformers (CPU)"
  python3 -m pytest -q -p no:cacheprovider tests/test_sampling.py tests/test_generation_config.py \
    tests/test_contracts.py tests/test_onnx_export.py
  echo "== 2. frameworks parity with HF generate on CUDA (fp32)"
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_parity.py -k frameworks
  echo "== 3. TensorRT builds from the given ONNX (--build-only)"
  build() {  # name family variant flags...
    local name=$1; shift
    python3 run.py run "$@" --build-only --device cuda -wd "$OUT/wd" --json "$OUT/builds/$name.json" \
      && echo "build $name: OK" || echo "build $name: FAILED"
  }
  seq2seq() { echo "--encoder-onnx $1/encoder.onnx --decoder-onnx $1/decoder.onnx --cache-generator-onnx $1/cache_generator.onnx"; }
  build gpt2-kv GPT2 trt --use-cache --decoder-onnx "$ONNX/GPT2/gpt2-offline/decoder-fp32-kv/model.onnx"
  build gpt2-kv-beams3 GPT2 trt --use-cache --num-beams 3 --decoder-onnx "$ONNX/GPT2/gpt2-offline/decoder-fp32-kv/model.onnx"
  build gpt2-static GPT2 trt --use-cache --static-cache --decoder-onnx "$ONNX/GPT2/gpt2-offline/decoder-fp32-static/model.onnx"
  build bloom-kv BLOOM trt --use-cache --decoder-onnx "$ONNX/BLOOM/bloom-offline/decoder-fp32-kv/model.onnx"
  # shellcheck disable=SC2046
  build t5-kv T5 trt --use-cache $(seq2seq "$ONNX/T5/t5-offline/seq2seq-fp32-kv")
  # shellcheck disable=SC2046
  build bart-kv BART trt --use-cache $(seq2seq "$ONNX/BART/bart-offline/seq2seq-fp32-kv")
  # shellcheck disable=SC2046
  build blip-kv BLIP trt --use-cache $(seq2seq "$ONNX/BLIP/blip-offline/vision2seq-fp32-kv")
  echo "== 4. another model's graph is refused before any build"
  python3 run.py run GPT2 trt --build-only --device cuda --use-cache -wd "$OUT/wd" \
    --decoder-onnx "$ONNX/BLOOM/bloom-offline/decoder-fp32-kv/model.onnx"; echo "exit $?"
  python3 - "$OUT"/builds/*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    data = json.load(open(path))
    for r in data["results"]:
        print(f"{path.rsplit('/', 1)[-1]}: {r['engine']} built={r['built']} {r['build_seconds']} s {r['engine_mb']:.1f} MB "
              f"{r['module']} {r['gpu']} CC {r['compute_capability']}")
PY
} 2>&1 | tee "$LOG"
