#!/usr/bin/env bash
# The smallest encoder shape's latency (MiniLM-L6-H384 shapes, 1 x 16) on the fastest paths, against PyTorch
# eager fp32 in the same run:
#
#   bash tools/bench/encoder_latency.sh     # any CUDA machine with the requirements plus onnxruntime-gpu
#
# 1. correctness of the CUDA-graph paths on the MiniLM-shaped classifier: logits of four padded texts from
#    onnxrt fp16 --use-cuda-graph and frameworks fp16 compiled + CUDA graph against frameworks fp32;
# 2. benchmark 1 x 16, 500 iterations: hf-eager fp32 (--hf-baseline), frameworks compiled + CUDA graph (default
#    and max-autotune), onnxrt fp16 optimized + CUDA graph; then 16 x 384 for the CUDA-graph rows.
# Table: $OUT/encoder_latency.md (OUT default temp/bench).
set -uo pipefail
. "$(dirname "$0")/common.sh"
J=/tmp/lat/json; mkdir -p $J
M=$SHAPES/minilm-l6-h384
make_shapes minilm-l6-h384
{
TEXTS=(--prompt "The weather is lovely today." --prompt "It's so sunny outside!" --prompt "He drove to the stadium."
       --prompt "A man is playing a guitar on a quiet street corner while people walk past him.")
for cfg in "ref|frameworks" "ort|onnxrt --fp16 --use-cuda-graph" "fw|frameworks --fp16 --torch-compile --use-cuda-graph"; do
  python3 run.py predict BERT ${cfg#*|} --torch-dir $M --device cuda --batch-size 4 "${TEXTS[@]}" -wd /tmp/lat/wd \
    --json $J/predict-${cfg%%|*}.json > /tmp/lat/predict-${cfg%%|*}.txt 2>&1 || tail -3 /tmp/lat/predict-${cfg%%|*}.txt
done
python3 - $J <<'PY'
import json, sys
rows = lambda tag: {r["prompt"]: r["logits"] for r in json.load(open(f"{sys.argv[1]}/predict-{tag}.json"))["results"]}
ref = rows("ref")
for tag in ("ort", "fw"):
    got = rows(tag)
    diff = max(abs(a - b) for p in ref for a, b in zip(ref[p], got[p]))
    same = all(max(range(len(ref[p])), key=ref[p].__getitem__) == max(range(len(got[p])), key=got[p].__getitem__) for p in ref)
    print(f"{tag} fp16 CUDA graph vs frameworks fp32: max |logits diff| {diff:.3g}, same labels: {same}")
PY
bench() {  # tag batch seq flags...
  local tag=$1 b=$2 s=$3; shift 3
  echo "== $tag ${b}x$s: $*"
  python3 run.py benchmark BERT "$@" --torch-dir $M --device cuda --batch-size $b --input-seq-len $s \
    --iterations 500 --warmup 50 -wd /tmp/lat/wd --json $J/minilm-l6-h384-${b}x$s-$tag.json 2>&1 | grep -E "^\|"
}
bench fp32 1 16 frameworks --hf-baseline
bench graph 1 16 frameworks onnxrt --fp16 --torch-compile --use-cuda-graph
bench autotune 1 16 frameworks --fp16 --torch-compile --compile-mode max-autotune --use-cuda-graph
bench graph 16 384 frameworks onnxrt --fp16 --torch-compile --use-cuda-graph
bench fp32 16 384 frameworks --hf-baseline
python3 tools/bench/encoder_speed_table.py $J $OUT/encoder_latency > /dev/null
cat $OUT/encoder_latency.md
} 2>&1 | tee $OUT/encoder_latency.log
