#!/bin/bash
# Llama-3-8B shapes: onnxrt (Linear op) / frameworks / HF static, with the logits_start input in the graph.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
t llama; timeout 330 python3 tools/bench/decoder_graphs.py $OUT/llama --models llama-3-8b --row-variants "" --skip build,kernels,onnxrt-matmul,flash-matmul,step,loop,tokens,eager,batch8 --deadline 300 > $OUT/b-llama.log 2>&1; echo rc $?
grep -h "|" $OUT/b-llama.log | tail -8
t done
