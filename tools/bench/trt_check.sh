#!/usr/bin/env bash
# TensorRT engine builds of the decoder-only families:
#
#   bash tools/bench/trt_check.sh [all|offline|gpt2|llama]   # any CUDA machine with the requirements plus
#                                                            # TensorRT or TensorRT-RTX (and onnxruntime-gpu)
# offline: the families' offline defaults; gpt2: GPT-2 124M shapes only; all: both; llama: the LLAMA family's
# random offline variants (Llama with llama3 rope, Mistral's window, Qwen2, Qwen3, Phi-3), builds only.
# For each model: `build` engines in fp32 and fp16, with and without KV cache, batch 1 and a dynamic batch
# range 1..8; then one real run of an engine, a truncated cached engine (expected: a 'rebuilding' warning) and a
# file that is no engine (expected: one line, exit 2), and the trt parity tests on CUDA. The table of build
# seconds, engine MB, module and GPU is written to $OUT/trt_builds-<which>.md (OUT default temp/bench).
set -uo pipefail
. "$(dirname "$0")/common.sh"
mkdir -p "$OUT/builds"
WD=/tmp/wd-trt
{
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
python3 -c "import torch; print('torch', torch.__version__)"
python3 -c "import tensorrt_rtx as t; print(t.__name__, t.__version__)" 2>/dev/null \
  || python3 -c "import tensorrt as t; print(t.__name__, t.__version__)" || echo "no TensorRT module"
make_shapes gpt2
n=0
case "${1:-all}" in
  offline) MODELS=("GPT2" "OPT" "BLOOM") ;;
  gpt2) MODELS=("GPT2 --torch-dir $SHAPES/gpt2 --n-positions 1024") ;;
  llama) MODELS=("LLAMA --variant llama3-offline" "LLAMA --variant mistral-offline" "LLAMA --variant qwen2-offline"
                 "LLAMA --variant qwen3-offline" "LLAMA --variant phi3-offline") ;;
  *) MODELS=("GPT2" "OPT" "BLOOM" "GPT2 --torch-dir $SHAPES/gpt2 --n-positions 1024") ;;
esac
for model in "${MODELS[@]}"; do
  for precision in "" "--fp16"; do
    for cache in "--use-cache" ""; do
      for batch in "--batch-size 1" "--batch-size 4 --dynamic-batch --min-dynamic-batch 1 --max-dynamic-batch 8"; do
        n=$((n+1))
        # shellcheck disable=SC2086
        python3 run.py build ${model%% *} trt ${model#"${model%% *}"} --device cuda $precision $cache $batch --use-timing-cache \
          -wd $WD --json "$OUT/builds/$n.json" || echo "build $n failed: $model $precision $cache $batch"
      done
    done
  done
done
echo "--- executing an engine (where TensorRT cannot run it here: one line, exit 2) ---"
[ "${1:-all}" = llama ] && python3 run.py run LLAMA trt --variant qwen2-offline --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
[ "${1:-all}" != llama ] && python3 run.py run GPT2 trt --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
if [ "${1:-all}" != gpt2 ] && [ "${1:-all}" != llama ]; then
  echo "--- a truncated cached engine: expected a 'rebuilding' warning, then the refusal above ---"
  f=$(ls -d $WD/GPT2/gpt2-offline/engine-GPT2-gpt2-offline-fp32-kv-batch1-*/decoder.engine | head -1)
  head -c 1000 "$f" > /tmp/truncated && cp /tmp/truncated "$f"
  python3 run.py run GPT2 trt --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
  echo "--- --decoder-engine with a file that is no engine: expected one line, exit 2 ---"
  echo garbage > /tmp/bad.engine
  python3 run.py run GPT2 trt --device cuda --use-cache --decoder-engine /tmp/bad.engine -wd $WD; echo "exit code: $?"
  echo "--- trt parity tests on CUDA: they skip with the reason where engines cannot run ---"
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_parity.py -k "trt and kv" 2>&1 | tail -8
fi
python3 tools/bench/trt_summary.py "$OUT/builds" > "$OUT/trt_builds-${1:-all}.md"
cat "$OUT/trt_builds-${1:-all}.md"
} 2>&1 | tee "$OUT/trt_check.log"
rm -rf "$OUT/builds"  # the summary holds what matters
