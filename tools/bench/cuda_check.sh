#!/usr/bin/env bash
# The harness core on CUDA: the parity tests (tests/test_parity.py: every offline variant, frameworks and onnxrt
# with IO binding, greedy and beam, padded batches, EOS, against HF generate on the same GPU, fp32); `compare` for
# every decoder family's offline default in fp32 (checked against checkpoint.toml's CPU HF-generate outputs) and
# fp16; `accuracy` and a beam-search `chat` on CUDA; then the GPT-2 124M-shapes benchmark in fp16 with HF generate
# as the in-run reference (prompt 32 / 64 new tokens, and prompt 128 / 256 new tokens).
#
#   bash tools/bench/cuda_check.sh             # any CUDA machine with the requirements plus onnxruntime-gpu
#   bash tools/bench/cuda_check.sh baselines   # only: GPT-2 124M shapes at batch 8 and gpt2-xl shapes at batch 1
#                                              # (fp16, prompt 128, 256 new tokens)
#   bash tools/bench/cuda_check.sh tests [N] [FILES]   # only: every test file that runs on CUDA (those reading
#       # HARNESS_TEST_DEVICE; or FILES, space-separated), in N pytest-xdist processes (default 4; 1 without
#       # pytest-xdist), sharing the GPU and one working dir; the failures' and skips' reasons at the end
#
# Logs and JSON go to $OUT (default temp/bench).
set -uo pipefail
. "$(dirname "$0")/common.sh"
{
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
WD=/tmp/wd
if [ "${1:-all}" = tests ]; then
  FILES=${3:-$(grep -l HARNESS_TEST_DEVICE tests/test_*.py | tr '\n' ' ')}
  PARALLEL="-n ${2:-4} --dist loadfile"
  python3 -c "import xdist" 2>/dev/null || PARALLEL=""
  # shellcheck disable=SC2086
  HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -rfs -p no:cacheprovider $PARALLEL --durations=15 $FILES
  exit 0
fi
if [ "${1:-all}" = baselines ]; then
  make_shapes gpt2
  make_shapes gpt2-xl
  python3 run.py benchmark GPT2 frameworks onnxrt --hf-baseline --torch-dir $SHAPES/gpt2 --device cuda --fp16 \
    --use-cache --batch-size 8 --input-seq-len 128 --output-seq-len 256 --iterations 5 --warmup 1 -wd $WD \
    --json "$OUT/bench_gpt2_b8_p128_n256.json"
  python3 run.py benchmark GPT2 frameworks onnxrt --hf-baseline --torch-dir $SHAPES/gpt2-xl --device cuda --fp16 \
    --use-cache --input-seq-len 128 --output-seq-len 256 --iterations 5 --warmup 1 -wd $WD \
    --json "$OUT/bench_gpt2xl_p128_n256.json" --plot "$OUT/per_token_gpt2xl.png"
  exit 0
fi
HARNESS_TEST_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider tests/test_parity.py
python3 run.py accuracy GPT2 frameworks onnxrt --device cuda --use-cache --dataset data/lambada_offline.jsonl \
  --num-samples 50 --tokens-to-generate 3 -wd $WD
python3 run.py chat GPT2 --compare frameworks onnxrt --device cuda --use-cache --num-beams 3 --max-new-tokens 16 \
  --prompt "The for statement" --prompt "A class definition" -wd $WD --json "$OUT/chat_cuda_beam3.json"
for fam in GPT2 OPT BLOOM; do
  python3 run.py compare $fam --compare frameworks onnxrt --use-cache --device cuda -wd $WD --iterations 3 --warmup 1
  python3 run.py compare $fam --compare frameworks onnxrt --use-cache --device cuda --fp16 -wd $WD --iterations 3 --warmup 1
done
make_shapes gpt2
python3 run.py benchmark GPT2 frameworks onnxrt --hf-baseline --torch-dir $SHAPES/gpt2 --device cuda --fp16 \
  --use-cache --input-seq-len 32 --output-seq-len 64 --iterations 20 --warmup 3 -wd $WD --json "$OUT/bench_gpt2_p32_n64.json"
python3 run.py benchmark GPT2 frameworks onnxrt --hf-baseline --torch-dir $SHAPES/gpt2 --device cuda --fp16 \
  --use-cache --input-seq-len 128 --output-seq-len 256 --iterations 10 --warmup 2 -wd $WD --json "$OUT/bench_gpt2_p128_n256.json"
} 2>&1 | tee "$OUT/cuda_check.log"
