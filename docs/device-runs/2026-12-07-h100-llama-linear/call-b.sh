#!/bin/bash
# Llama-3-8B shapes: onnxrt (Linear op) / frameworks / HF static and the onnxrt step's kernels; then GPT-J-6B's
# onnxrt row (the graph built and checked at full size with the Linear op) beside HF static.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
df -h /tmp | tail -1
t llama; timeout 330 python3 tools/bench/decoder_graphs.py $OUT/llama --models llama-3-8b --row-variants "" --skip build,kernels,onnxrt-matmul,flash-matmul,step,loop,tokens,eager,batch8 --deadline 300 > $OUT/b-llama.log 2>&1; echo rc $?
grep -h "|" $OUT/b-llama.log | tail -8
df -h /tmp | tail -1
t gptj; timeout 230 python3 tools/bench/decoder_graphs.py $OUT/gptj --models gpt-j-6b --row-variants "" --skip build,kernels,onnxrt-matmul,flash,flash-matmul,frameworks,step,loop,tokens,eager,batch8 --deadline 200 > $OUT/b-gptj.log 2>&1; echo rc $?
grep -h "|" $OUT/b-gptj.log | tail -8
t done
