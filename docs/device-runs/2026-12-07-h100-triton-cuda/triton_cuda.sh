#!/bin/bash
# Triton on CUDA: models deployed with `--static-cache --fp16` (the fused decode graphs built from the weights, on
# this project's ops where the family's builder takes them on CUDA, their library copied beside the graphs), served
# by the nvidia-pytriton wheel's tritonserver on loopback, queried over gRPC: the served tokens against the
# in-process onnxrt row's (generate's own check), then served against in process timed by `benchmark`.
#   bash triton_cuda.sh [cuda|cpu [qwen]]  # from the repository root; $OUT for the logs (default temp/triton-check);
#                                          # on the CPU only llama-offline unless `qwen` is given
set -uo pipefail
DEVICE=${1:-cuda}
QWEN=${QWEN:-$([ "$DEVICE" = cuda ] || [ "${2:-}" = qwen ] && echo 1 || echo 0)}  # QWEN=0: llama-offline only
OUT=${OUT:-temp/triton-check}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
if [ "$DEVICE" = cuda ]; then
  PREC="--fp16"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
else
  PREC="--cpu"
fi
python3 -c "import torch, transformers, onnxruntime as o, tritonclient, sys; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
WD=/tmp/wd-triton; REPO=/tmp/repo-triton; rm -rf "$REPO"; mkdir -p "$REPO"
[ $QWEN = 1 ] && t shapes && python3 tools/assets/make_shapes_model.py qwen2.5-0.5b /tmp/shapes/qwen > /dev/null 2>&1; echo rc $?
t deploy llama-offline
python3 run.py deploy LLAMA onnxrt --static-cache $PREC --repository "$REPO" -wd $WD 2>&1 | grep -E "^\||^note|^error"
t deploy qwen2.5-0.5b shapes, streaming
[ $QWEN = 1 ] && python3 run.py deploy LLAMA onnxrt --torch-dir /tmp/shapes/qwen --variant qwen-shapes --static-cache $PREC --streaming \
  --model-name qwen-shapes-onnxrt --repository "$REPO" -wd $WD 2>&1 | grep -E "^\||^note|^error"
ls "$REPO"/*/1 | head -20
t serve
python3 run.py serve "$REPO" --http-port 18000 --grpc-port 18001 --metrics-port 18002 > "$OUT/serve.log" 2>&1 &
SERVER=$!
for i in $(seq 150); do grep -q "^serving" "$OUT/serve.log" && break; kill -0 $SERVER 2>/dev/null || break; sleep 2; done
cat "$OUT/serve.log" | head -20
URL="--triton-url grpc://127.0.0.1:18001"
t generate llama-offline served against in process
python3 run.py generate LLAMA onnxrt triton --static-cache $PREC --triton-model llama-offline-onnxrt $URL \
  --prompt "The cat" --prompt "A long time ago in a land far away" --prompt "Hello" --max-new-tokens 48 \
  -wd $WD --json "$OUT/llama-generate.json" > "$OUT/llama-generate.log" 2>&1; echo rc $?
grep -E "^\||^note: triton|^error" "$OUT/llama-generate.log"
if [ $QWEN = 1 ]; then
t generate qwen shapes served against in process
python3 run.py generate LLAMA onnxrt triton --torch-dir /tmp/shapes/qwen --variant qwen-shapes --static-cache $PREC \
  --triton-model qwen-shapes-onnxrt $URL --prompt "The cat" --prompt "A long time ago in a land far away" \
  --prompt "Hello" --max-new-tokens 32 -wd $WD --json "$OUT/qwen-generate.json" > "$OUT/qwen-generate.log" 2>&1; echo rc $?
grep -E "^note: triton|^error" "$OUT/qwen-generate.log"
t benchmark qwen shapes served against in process
python3 run.py benchmark LLAMA onnxrt triton --torch-dir /tmp/shapes/qwen --variant qwen-shapes --static-cache $PREC \
  --triton-model qwen-shapes-onnxrt $URL --input-seq-len 128 --output-seq-len 128 --iterations 10 \
  -wd $WD --json "$OUT/qwen-benchmark.json" > "$OUT/qwen-benchmark.log" 2>&1; echo rc $?
grep -E "^\||^note|^error" "$OUT/qwen-benchmark.log" | cut -c1-400
fi
t stop
kill -TERM $SERVER; wait $SERVER; echo "serve rc $?"; tail -5 "$OUT/serve.log"
cp "$(grep -o '/tmp/tritonserver-[^ ;]*\.log' "$OUT/serve.log" | head -1)" "$OUT/tritonserver.log" 2>/dev/null
t done
