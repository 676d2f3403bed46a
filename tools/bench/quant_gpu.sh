#!/usr/bin/env bash
# int4 weights on ONNX Runtime's CUDA execution provider:
#
#   bash tools/bench/quant_gpu.sh [xl|gpt2|all]     # any CUDA machine with the requirements plus onnxruntime-gpu
#
# For each shape (xl: gpt2-xl 1.56B; gpt2: GPT-2 124M; all: both): make the shapes model, export the fp16 decoder
# (KV cache), quantize it to int4 (MatMulNBits, the default blocks: 128, asymmetric), and benchmark onnxrt fp16
# against onnxrt int4 in one run: batch 1, prompt 128, 256 new tokens, 20 iterations after 5 warm-up. TPOT is the
# number to hold against the fp16 weight-bytes floor of gpt2-xl (3.1 GB per token / 4.8 TB/s = 0.73 ms on an
# H200). Results: $OUT/quant-<shape>.json and $OUT/quant-gpu.log (tables, the int4 graph's agreement with the
# fp16 one, the placement of MatMulNBits nodes). xl takes about 10 minutes (export ~3 min, quantization and
# validation ~1-2 min, two rows of 25 x 256 tokens).
#
# CPU smoke run (checks everything but CUDA and fp16):
#   DEVICE=cpu ITERATIONS=1 WARMUP=0 bash tools/bench/quant_gpu.sh gpt2
set -uo pipefail
. "$(dirname "$0")/common.sh"
GROUP=${1:-xl}
DEVICE=${DEVICE:-cuda} ITERATIONS=${ITERATIONS:-20} WARMUP=${WARMUP:-5}
PRECISION=$([ "$DEVICE" = cuda ] && echo --fp16 || echo "")  # fp16 is CUDA-only in this harness
case $GROUP in xl) MODELS="gpt2-xl";; gpt2) MODELS="gpt2";; all) MODELS="gpt2 gpt2-xl";;
  *) echo "usage: quant_gpu.sh [xl|gpt2|all]" >&2; exit 2;; esac
{
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
for shape in $MODELS; do
  make_shapes "$shape"
  python3 run.py benchmark GPT2 onnxrt --quantize none int4 --torch-dir "$SHAPES/$shape" --device "$DEVICE" \
    $PRECISION --use-cache --input-seq-len 128 --output-seq-len 256 --iterations "$ITERATIONS" --warmup "$WARMUP" -wd /tmp/wd \
    --json "$OUT/quant-$shape.json" 2>&1 | tail -8
  for f in /tmp/wd/GPT2/local-"$shape"-*/decoder-*-kv-int4-*/validation.json; do echo "$f"; cat "$f"; done
  for f in /tmp/wd/GPT2/local-"$shape"-*/decoder-*-kv-int4-*/model.onnx; do  # where ONNX Runtime runs MatMulNBits
    if [ "$DEVICE" = cuda ]; then python3 tools/bench/ort_placement.py "$f" 2>&1 | grep -i "matmulnbits\|memcpy\|cpu" | head -8; fi
  done
done
} 2>&1 | tee "$OUT/quant-gpu.log"
