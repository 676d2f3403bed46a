#!/usr/bin/env bash
# The LLAMA family on CUDA, one mode per device call (each fits 10 minutes on an H100):
#
#   bash tools/bench/llama_check.sh ab|mistral|ort|tests|final   # any CUDA machine with the requirements, plus
#                                                          # onnxruntime-gpu for ort and the graph tests
# ab: the fused step's settings A/B at Qwen2.5-0.5B shapes (the captured step's GPU time and kernels per
#     variant), then the rows of the fastest variant and the default beside HF static and eager
#     (speed_matrix.py --group llama-ab, prompt 128, 128 new) -> $OUT/speed-llama-ab-qwen2.5-0.5b.{json,md}
# mistral: the same at Mistral-7B shapes with a 64-column window (default and sdpa), with the fp16 token check
# ort: the fused ONNX Runtime graph (built from the weights) at Qwen2.5-0.5B, Mistral-7B and Llama-3-8B shapes
# tests: the family's fused step and graph tests on CUDA (parity with HF generate in fp32; the graph in fp16)
# final: the default step against transposed V buffers at both shapes, rows, then the fused step's CUDA tests
# kernels: our Triton kernels (NNDF/backends/torch/kernels.py): their CUDA tests, the fused step with them at
#     Qwen2.5-0.5B shapes (variants attention-kernel, gemv-long, kernels-long against the default; no HF rows),
#     then each kernel alone against cuBLAS / inductor / SDPA over a grid of tilings (kernel_bench.py)
# kernels-qwen: the rows at Qwen2.5-0.5B shapes with HF's beside them: the default step against kernels-long
#     (down and attention through our kernels), kernels-long-head (and the LM head) and kernels (every product)
# kernels-mistral: the default step against inductor's kernels at Mistral-7B shapes (64-column window), token check
# kernels-wide: the default step (our GEMV for every product) against kernels-narrow (cuBLAS at 4096 features) and
#     inductor's kernels at Mistral-7B and Llama-3-8B shapes, then each kernel alone at Mistral-7B shapes
# kernels-final: the CUDA tests of the kernels and of the family's fused step, then the Qwen2.5-0.5B rows (the
#     default step against inductor's kernels) with HF static and eager beside them
# TensorRT builds of the family: tools/bench/trt_check.sh llama.
set -uo pipefail
. "$(dirname "$0")/common.sh"
{
nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm,clocks.max.mem --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
case "${1:-ab}" in
  ab) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes qwen2.5-0.5b --deadline 500 ;;
  mistral) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes mistral-7b-w64 \
             --deadline 420 ;;
  ort) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ort --new 128 --deadline 480 ;;
  tests) HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_llama_fused.py \
           tests/test_llama_fused_ort.py 2>&1 | tail -15 ;;
  final) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --variants default,transposed-values \
           --ab-shapes qwen2.5-0.5b,mistral-7b-w64 --deadline 330
         HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_llama_fused.py 2>&1 | tail -15 ;;
  kernels) HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_torch_kernels.py \
             tests/test_llama_fused.py -k "kernels or triton or settings" 2>&1 | tail -15
           python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes qwen2.5-0.5b --no-hf \
             --variants default,attention-kernel,gemv-long,kernels-long --deadline 240
           timeout 240 python3 tools/bench/kernel_bench.py "$OUT" --shapes qwen2.5-0.5b ;;
  kernels-qwen) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes qwen2.5-0.5b \
             --variants default,kernels-long,kernels-long-head,kernels --deadline 480 ;;
  kernels-mistral) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes mistral-7b-w64 \
             --variants default,inductor --deadline 400 ;;
  kernels-wide) python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 \
             --ab-shapes mistral-7b-w64,llama-3-8b --variants default,kernels-narrow,inductor --deadline 360
           timeout 200 python3 tools/bench/kernel_bench.py "$OUT" --shapes mistral-7b ;;
  kernels-final) HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rs -p no:cacheprovider tests/test_torch_kernels.py \
             tests/test_llama_fused.py 2>&1 | tail -15
           python3 tools/bench/speed_matrix.py "$OUT" --group llama-ab --new 128 --ab-shapes qwen2.5-0.5b \
             --variants default,inductor --deadline 400 ;;
  *) echo "modes: ab, mistral, ort, tests, final, kernels, kernels-qwen, kernels-mistral, kernels-wide, kernels-final" ; exit 2 ;;
esac
} 2>&1 | tee "$OUT/llama_check-${1:-ab}.log"
