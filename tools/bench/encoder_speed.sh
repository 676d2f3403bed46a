#!/usr/bin/env bash
# Encoder speed on a GPU, through the CLI:
#
#   bash tools/bench/encoder_speed.sh [minilm|roberta|all]   # any CUDA machine with the requirements plus
#                                                            # onnxruntime-gpu (and TensorRT for the engine builds)
#
# Models: random-weight sequence classifiers with the shapes of MiniLM-L6-H384, roberta-base and roberta-large
# (tools/assets/make_shapes_model.py; speed does not depend on the values). For each shape (batch x seq):
#   fp32:   hf-eager (HF model, eager, --hf-baseline) and frameworks eager, onnxrt (optimizer on)
#   fp16:   frameworks eager; onnxrt optimized with IO binding; onnxrt without the optimizer
#   graph:  frameworks --torch-compile --use-cuda-graph; onnxrt optimized --use-cuda-graph (fp16)
#   trt:    the fp16 engine for the shape (the build action)
# Every run writes JSON to /tmp/enc/json; encoder_speed_table.py folds them into $OUT/encoder_speed-GROUP.md / .json.
set -uo pipefail
. "$(dirname "$0")/common.sh"
GROUP=${1:-all}
J=/tmp/enc/json
mkdir -p $J
ITER="--iterations 200 --warmup 20"
{
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
bench() {  # tag shape batch seq backends/flags...
  local tag=$1 shape=$2 batch=$3 seq=$4; shift 4
  echo "== $tag $shape ${batch}x$seq: $*"
  python3 run.py benchmark BERT "$@" --torch-dir "$SHAPES/$shape" --device cuda --batch-size "$batch" \
    --input-seq-len "$seq" $ITER -wd /tmp/enc/wd --json "$J/$shape-${batch}x$seq-$tag.json" 2>&1 | tail -12
}
shape_rows() {  # shape "batch seq" ...
  local shape=$1; shift
  make_shapes "$shape" || echo "shape $shape: FAILED"
  for bs in "$@"; do
    set -- $bs
    bench fp32 "$shape" "$1" "$2" frameworks onnxrt --hf-baseline
    bench fp16 "$shape" "$1" "$2" frameworks onnxrt --fp16
    bench fp16-noopt "$shape" "$1" "$2" onnxrt --fp16 --no-ort-optimize
    bench graph "$shape" "$1" "$2" frameworks onnxrt --fp16 --torch-compile --use-cuda-graph
    python3 run.py build BERT trt --torch-dir "$SHAPES/$shape" --device cuda --fp16 \
      --batch-size "$1" --seq-len 1 "$2" "$2" -wd /tmp/enc/wd --json "$J/$shape-${1}x$2-trtbuild.json" 2>&1 | tail -4
  done
}
case $GROUP in minilm|all) shape_rows minilm-l6-h384 "1 16" "16 384";; esac
case $GROUP in roberta|all) shape_rows roberta-base "1 16" "16 384"; shape_rows roberta-large "16 384";; esac
python3 tools/bench/encoder_speed_table.py $J "$OUT/encoder_speed-$GROUP"
} 2>&1 | tee "$OUT/encoder_speed-$GROUP.log"
