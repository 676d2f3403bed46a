#!/usr/bin/env bash
# Export the fp32 ONNX graphs (KV cache; GPT2 also static) of the offline defaults on any machine (the CPU is
# fine) into DIR (default .devonnx), laid out as a working dir (<FAMILY>/<variant>/<artifact>/<part>.onnx), each
# validated against PyTorch as usual: the input of tools/device/contracts_check.sh's TensorRT builds.
#
#   PYTHON=.venv/bin/python bash tools/device/export_offline_onnx.sh [DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
DIR=${1:-.devonnx}
PY=${PYTHON:-python3}
export HF_HUB_OFFLINE=1
for family in GPT2 BLOOM T5 BART; do
  "$PY" run.py run "$family" onnxrt --use-cache -wd "$DIR" --iterations 1 --warmup 0 > /dev/null
done
"$PY" run.py run GPT2 onnxrt --use-cache --static-cache -wd "$DIR" --iterations 1 --warmup 0 > /dev/null
"$PY" run.py run BLIP onnxrt --use-cache -wd "$DIR" --iterations 1 --warmup 0 > /dev/null
find "$DIR" -name "*.onnx" | sort
