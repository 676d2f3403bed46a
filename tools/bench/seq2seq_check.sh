#!/usr/bin/env bash
# Encoder-decoder (T5, BART/mBART) and image-to-text (BLIP) on CUDA:
#
#   bash tools/bench/seq2seq_check.sh [all|cuda|fp16|trt|blip]   # any CUDA machine with the requirements plus
#                                                               # onnxruntime-gpu and TensorRT (or TensorRT-RTX)
# 1. parity tests on CUDA (tests/test_parity.py -k "T5 or BART": frameworks and onnxrt with IO binding, greedy and
#    beam, padded batches, EOS, against HF generate on the same GPU, fp32);
# 2. `compare` for every offline variant in fp32 (against checkpoint.toml's CPU HF-generate outputs) and fp16;
# 3. tools/bench/fp16_seq2seq.py: fp16 ONNX Runtime CUDA logits against PyTorch fp32, with and without islands;
# 4. TensorRT: `build` engines (encoder, decoder, cache generator) for both families' offline defaults,
#    fp32 and fp16, with and without KV cache; then one run of the engines.
# cuda: 1 and 2; fp16: 3; trt: 4; all: 1 to 4; blip: BLIP's CUDA parity, compare fp32/fp16, fp16 vs fp32 (vision
# encoder fp16 or fp32), trt builds fp32/fp16 with and without cache. Logs and tables in $OUT (default temp/bench).
#
#   bash tools/bench/seq2seq_check.sh kernels-tests                 # no onnxruntime-gpu needed
#   bash tools/bench/seq2seq_check.sh kernels-rows MODELS [ARGS]    # e.g. t5-small,bart-large --variants inductor
# kernels-tests: the static-cache steps' CUDA tests (our Triton kernels in fp32 against HF, graphs, compiled);
# kernels-rows: tools/bench/seq2seq_speed.py's frameworks jobs for MODELS (comma-separated), ARGS passed on.
#
#   bash tools/bench/seq2seq_check.sh ort-rows MODELS               # needs onnxruntime-gpu
# ort-rows: onnxrt's built graphs in fp16 on CUDA: T5's `wo` output past fp16's range (the test, then the same test
# with the residual stream unscaled, which must fail); per model the frameworks row with HF static beside it, the
# onnxrt rows (batch 1, 4 beams, batch 8), fp16 tokens against HF and the onnxrt step's kernels; then the step's
# kernels again under each of ONNX Runtime's attention kernel choices (its environment variables, one process each).
#
#   bash tools/bench/seq2seq_check.sh ort-batch MODELS [ORT_VARIANTS]  # needs onnxruntime-gpu
# ort-batch: the Linear op's CUDA tests and the built graphs' (tests/test_seq2seq_fused_ort.py); products alone at 8
# rows (ONNX Runtime's MatMul, the op's tensor-core kernel with 4 and 8 warps everywhere and as it chooses, cuBLAS);
# per model the onnxrt rows at batch 1, 4 beams and batch 8 (also with each of ORT_VARIANTS, comma-separated, e.g.
# rmskernel,nopdl: tools/bench/speed_matrix.py's ORT_VARIANTS), fp16 tokens at batch 8 against HF and the 8-row
# step's kernels (also with each variant).
set -uo pipefail
. "$(dirname "$0")/common.sh"
mkdir -p "$OUT/builds"
WD=/tmp/wd-s2s
n=0
build() {  # build <family> <max prompt> <max new>: engines in fp32/fp16, with/without cache, 2 x 2 beams
  for precision in "" "--fp16"; do
    for cache in "--use-cache" ""; do
      n=$((n+1))
      # shellcheck disable=SC2086
      python3 run.py build "$1" trt --device cuda $precision $cache --num-beams 2 --batch-size 2 \
        --input-profile-max-len "$2" --output-profile-max-len "$3" -wd $WD --json "$OUT/builds/$n.json" \
        || echo "build $n failed: $1 $precision $cache"
    done
  done
}
{
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__)"
python3 -c "import tensorrt_rtx as t; print(t.__name__, t.__version__)" 2>/dev/null \
  || python3 -c "import tensorrt as t; print(t.__name__, t.__version__)" || echo "no TensorRT module"
MODE=${1:-all}
if [ "$MODE" = all ] || [ "$MODE" = cuda ]; then
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_parity.py -k "T5 or BART" 2>&1 | tail -12
for v in "T5 t5-offline" "T5 flan-t5-offline" "BART bart-offline" "BART mbart-offline"; do
  set -- $v
  python3 run.py compare $1 --variant $2 --compare frameworks onnxrt --use-cache --device cuda -wd $WD --iterations 3 --warmup 1
  python3 run.py compare $1 --variant $2 --compare frameworks onnxrt --use-cache --device cuda --fp16 -wd $WD --iterations 3 --warmup 1
done
fi
if [ "$MODE" = kernels-tests ]; then
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rfs -p no:cacheprovider tests/test_torch_kernels.py \
  tests/test_t5_fused.py tests/test_bart_fused.py tests/test_blip_fused.py tests/test_seq2seq_static.py \
  tests/test_greedy_in_step.py tests/test_beam_graph.py 2>&1 | tail -15
fi
if [ "$MODE" = kernels-rows ]; then
MODELS=$2; shift 2
python3 tools/bench/seq2seq_speed.py "$OUT" --models "$MODELS" --deadline 480 \
  --skip onnxrt,beams-onnxrt,batch8-onnxrt,kernels-onnxrt,kernels-onnxrt-rows4,kernels-autotuned,autotuned "$@"
fi
if [ "$MODE" = ort-rows ]; then
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rfs -p no:cacheprovider tests/test_seq2seq_fused_ort.py \
  -k past_the_fp16 2>&1 | tail -3
HARNESS_TEST_DEVICE=cuda python3 -c "import sys, pytest, T5.fused_onnx as f; f.RESIDUAL_SCALE = 1.0; \
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/test_seq2seq_fused_ort.py', '-k', 'past_the_fp16']))" \
  2>&1 | tail -3
echo "the same test with the residual stream unscaled (must fail): exit code $?"
MODELS=${2:?ort-rows MODELS}
NOT_ORT=eager,beams,batch8,loop,loop-beams,kernels,kernels-rows4,kernels-rows8,kernels-onnxrt-rows4,kernels-autotuned
python3 tools/bench/seq2seq_speed.py "$OUT/ort" --models "$MODELS" --deadline 330 --keep --row-variants "" \
  --variants "" --skip "$NOT_ORT,autotuned"
for choice in ORT_ENABLE_CUDNN_FLASH_ATTENTION=0 ORT_ENABLE_CUDNN_FLASH_ATTENTION=1 \
    ORT_DISABLE_MEMORY_EFFICIENT_ATTENTION=1 ORT_DISABLE_FLASH_ATTENTION=1; do
  env $choice python3 tools/bench/seq2seq_speed.py "$OUT/ort-${choice%=*}-${choice#*=}" --models "$MODELS" \
    --deadline 120 \
    --keep --row-variants "" --variants "" --skip "$NOT_ORT,autotuned,compiled,onnxrt,beams-onnxrt,batch8-onnxrt,tokens"
done
ORT_ENABLE_ATTENTION_KERNEL_DEBUG_INFO=1 python3 tools/bench/seq2seq_speed.py "$OUT/ort-kernel-names" \
  --models "$MODELS" --deadline 120 --keep --row-variants "" --variants "" \
  --skip "$NOT_ORT,autotuned,compiled,onnxrt,beams-onnxrt,batch8-onnxrt,tokens" 2>&1 | grep -a "Operator=" \
  | sed 's/Node=[^ ]* //' | sort | uniq -c
fi
if [ "$MODE" = ort-batch ]; then
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rfs -p no:cacheprovider tests/test_ort_custom_ops.py \
  tests/test_seq2seq_fused_ort.py 2>&1 | tail -8
python3 tools/bench/ort_matmul_layouts.py "$OUT/products" --shapes 2048x10240,5120x2048,2048x6144,2048x2048 \
  --rows 8 --layouts matmul,linear --layers 24 \
  --linear-knobs ",NNDF_ORT_LINEAR_DOT_WARPS=4,NNDF_ORT_LINEAR_DOT_WARPS=8,NNDF_ORT_LINEAR_DOT=0" 2>&1 \
  | grep -v Warning
MODELS=${2:?ort-batch MODELS}
VARIANTS=${3:-}
ONLY_ORT=compiled,eager,beams,batch8,loop,loop-beams,tokens,kernels,kernels-rows4,kernels-rows8,kernels-onnxrt
ONLY_ORT=$ONLY_ORT,kernels-onnxrt-rows4,kernels-autotuned,autotuned
for v in ${VARIANTS//,/ }; do ONLY_ORT=$ONLY_ORT,onnxrt-$v,tokens-onnxrt-$v,kernels-onnxrt-$v; done
python3 tools/bench/seq2seq_speed.py "$OUT/ort" --models "$MODELS" --deadline 420 --row-variants "" --variants "" \
  --ort-variants "$VARIANTS" --skip "$ONLY_ORT"
fi
if [ "$MODE" = all ] || [ "$MODE" = fp16 ]; then
python3 tools/bench/fp16_seq2seq.py | tee "$OUT/fp16_seq2seq.jsonl"
fi
if [ "$MODE" = blip ]; then
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_vision2seq.py -k parity 2>&1 | tail -5
python3 run.py compare BLIP --compare frameworks onnxrt --use-cache --device cuda -wd $WD --iterations 3 --warmup 1
python3 run.py compare BLIP --compare frameworks onnxrt --use-cache --device cuda --fp16 -wd $WD --iterations 3 --warmup 1
python3 tools/bench/fp16_seq2seq.py blip | tee "$OUT/fp16_blip.jsonl"
build BLIP 16 32
python3 run.py run BLIP trt --device cuda --use-cache -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
python3 tools/bench/trt_summary.py "$OUT/builds" > "$OUT/trt_builds-blip.md"
cat "$OUT/trt_builds-blip.md"
fi
if [ "$MODE" = all ] || [ "$MODE" = trt ]; then
build T5 128 64
build BART 128 64
echo "--- executing T5 engines (where TensorRT cannot run them here: one line, exit 2) ---"
python3 run.py run T5 trt --device cuda --use-cache --num-beams 2 --batch-size 2 --input-profile-max-len 128 \
  --output-profile-max-len 64 -wd $WD --iterations 1 --warmup 0; echo "exit code: $?"
python3 tools/bench/trt_summary.py "$OUT/builds" > "$OUT/trt_builds-seq2seq.md"
cat "$OUT/trt_builds-seq2seq.md"
fi
} 2>&1 | tee "$OUT/seq2seq_check-${1:-all}.log"
rm -rf "$OUT/builds"
