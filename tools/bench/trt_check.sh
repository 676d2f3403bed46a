#!/usr/bin/env bash
# TensorRT engine builds, in ONE device call, after ../shared/device/stage.sh's packages are in /tmp/site
# (tensorrt_rtx 1.7 and onnxruntime-gpu; full TensorRT cannot be installed in this workplace).
#
#   bash tools/bench/trt_check.sh    # any CUDA machine with the requirements plus TensorRT or TensorRT-RTX
# or, in this workplace (packages staged by ../shared/device/stage.sh), through the device tool:
#   run(command='sh .device/part-07/install.sh && bash tools/bench/trt_check.sh', carry=['.device/part-07', '.whl'])
#   bash tools/bench/trt_check.sh offline   # only the families' offline defaults (fits one 10-minute call)
#   bash tools/bench/trt_check.sh gpt2      # only GPT-2 124M shapes
#
# For every decoder-only family's offline default and for GPT-2 124M shapes: --build-only engines in fp32 and
# fp16, with and without KV cache, batch 1 and a dynamic batch range 1..8; then one real run, which shows what
# TensorRT-RTX says about executing on this GPU (Hopper: refused, one line, exit 2). The table of build
# seconds, engine MB, module and GPU is written to $OUT/trt_builds-<which>.md (see docs/VERIFICATION.md).
set -uo pipefail
. "$(dirname "$0")/env.sh"
WD=/tmp/wd-trt
{
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
python3 -c "import tensorrt_rtx as t, torch; print('tensorrt_rtx', t.__version__, 'torch', torch.__version__)"
python3 tools/assets/make_shapes_model.py gpt2 /tmp/shapes/gpt2 >/dev/null 2>&1
n=0
case "${1:-all}" in
  offline) MODELS=("GPT2" "OPT" "BLOOM") ;;
  gpt2) MODELS=("GPT2 --torch-dir /tmp/shapes/gpt2 --n-positions 1024") ;;
  *) MODELS=("GPT2" "OPT" "BLOOM" "GPT2 --torch-dir /tmp/shapes/gpt2 --n-positions 1024") ;;
esac
for model in "${MODELS[@]}"; do
  for precision in "" "--fp16"; do
    for cache in "--use-cache" ""; do
      for batch in "--batch-size 1" "--batch-size 4 --dynamic-batch --min-dynamic-batch 1 --max-dynamic-batch 8"; do
        n=$((n+1))
        # shellcheck disable=SC2086
        python3 run.py run ${model%% *} trt ${model#"${model%% *}"} --build-only --device cuda $precision $cache $batch --use-timing-cache \
          -wd $WD --json "$OUT/builds/$n.json" || echo "build $n failed: $model $precision $cache $batch"
      done
    done
  done
done
echo "--- executing an engine (expected on Hopper with TensorRT-RTX: refused, exit 2) ---"
python3 run.py run GPT2 trt --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
if [ "${1:-all}" != gpt2 ]; then
  echo "--- a truncated cached engine: expected a 'rebuilding' warning, then the refusal above ---"
  f=$(ls -d $WD/GPT2/gpt2-offline/engine-GPT2-gpt2-offline-fp32-kv-batch1-*/decoder.engine | head -1)
  head -c 1000 "$f" > /tmp/truncated && cp /tmp/truncated "$f"
  python3 run.py run GPT2 trt --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
  echo "--- --decoder-engine with a file that is no engine: expected one line, exit 2 ---"
  echo garbage > /tmp/bad.engine
  python3 run.py run GPT2 trt --device cuda --use-cache --decoder-engine /tmp/bad.engine -wd $WD; echo "exit code: $?"
  echo "--- trt parity tests on CUDA: expected to skip with the reason (engines cannot run here) ---"
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_parity.py -k "trt and kv" 2>&1 | tail -8
fi
python3 tools/bench/trt_summary.py "$OUT/builds" > "$OUT/trt_builds-${1:-all}.md"
cat "$OUT/trt_builds-${1:-all}.md"
} 2>&1 | tee "$OUT/trt_check.log"
rm -rf "$OUT/builds"  # the summary holds what matters; at most 8 files come back
