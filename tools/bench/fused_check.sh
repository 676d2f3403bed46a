#!/usr/bin/env bash
# The decoder families' fused decode steps (--fused-decode) on a CUDA machine, one mode per command:
#
#   bash tools/bench/fused_check.sh kernels-tests  # every decoder family's step on our Triton kernels (the default on
#                                                  # CUDA): the kernels' and the steps' CUDA tests (fp32 parity with HF)
#   bash tools/bench/fused_check.sh kernels-rows MODELS [ARGS]  # decoder_graphs.py rows for comma-separated
#       # shapes: onnxrt (the graph built from the weights), frameworks (the fused step on our kernels) and
#       # frameworks-inductor (the same step without them), the captured step's GPU time and kernels, both loops
#       # profiled; HF static beside onnxrt; ARGS go to decoder_graphs.py (--row-variants, --variants, ...)
#
#   bash tools/bench/fused_check.sh ort-gpt2    # onnxrt: CUDA tests + fused/static/growing one-token step, GPT-2 124M
#   bash tools/bench/fused_check.sh ort-xl      # the same bench for gpt2-xl shapes (two full exports: minutes)
#   bash tools/bench/fused_check.sh steps       # frameworks: HF's compiled step vs the fused variants (GPU time, kernels)
#   bash tools/bench/fused_check.sh tests       # frameworks + onnxrt fused parity on CUDA (fp32 / CUDA graphs / compiled)
#   bash tools/bench/fused_check.sh matrix-gpt2 # the benchmark rows (speed_matrix.py --group fused-gpt2)
#   bash tools/bench/fused_check.sh matrix-xl   # the same for gpt2-xl shapes
#   bash tools/bench/fused_check.sh final       # a short re-measure of the fused rows and their baselines
#
# The onnxrt modes need onnxruntime-gpu. Results: $OUT/<mode>/... and $OUT/fused-<mode>.log (OUT default
# temp/bench); shapes models in $SHAPES (default temp/shapes).
set -uo pipefail
. "$(dirname "$0")/common.sh"
MODE=${1:?usage: fused_check.sh kernels-tests|kernels-rows MODELS|ort-gpt2|ort-xl|steps|tests|matrix-gpt2|matrix-xl|final}
{
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())" 2>&1 | tail -1
case $MODE in
  kernels-tests)
    HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rfs -p no:cacheprovider tests/test_torch_kernels.py \
      tests/test_fused_decode.py tests/test_opt_fused.py tests/test_rotary_fused.py tests/test_bloom_fused.py \
      tests/test_llama_fused.py tests/test_greedy_in_step.py 2>&1 | tail -30;;
  kernels-rows)
    python3 tools/bench/decoder_graphs.py "$OUT/kernels-rows" --models "${2:?kernels-rows MODELS}" \
      --skip build,kernels,flash,batch8 --shapes-dir /tmp/shapes --deadline 500 "${@:3}";;
  ort-gpt2)
    HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -s -p no:cacheprovider tests/test_fused_decode_ort.py 2>&1 | tail -25
    python3 tools/bench/ort_fused_bench.py --out "$OUT/ort-gpt2" --models gpt2 --shapes-dir "$SHAPES" --working-dir /tmp/wd;;
  ort-xl)
    python3 tools/bench/ort_fused_bench.py --out "$OUT/ort-xl" --models gpt2-xl --shapes-dir "$SHAPES" --working-dir /tmp/wd;;
  steps)
    python3 tools/bench/fused_step_bench.py "$OUT/steps" --budget-s 420;;
  tests)
    HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_fused_decode.py tests/test_fused_decode_ort.py 2>&1 | tail -30;;
  matrix-gpt2)
    make_shapes gpt2
    python3 tools/bench/speed_matrix.py "$OUT/matrix" --group fused-gpt2 --workdir /tmp/wd --shapes-dir "$SHAPES" --deadline 480;;
  final)
    make_shapes gpt2
    python3 tools/bench/speed_matrix.py "$OUT/matrix" --group fused-final --workdir /tmp/wd --shapes-dir "$SHAPES" --deadline 420;;
  matrix-xl)
    python3 tools/bench/speed_matrix.py "$OUT/matrix" --group fused-xl --workdir /tmp/wd --shapes-dir "$SHAPES" --deadline 420;;
  *) echo "unknown mode $MODE" >&2; exit 2;;
esac
} 2>&1 | tee "$OUT/fused-$MODE.log"
