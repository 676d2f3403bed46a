#!/bin/bash
# t5-small's and BART-large's fp16 tokens at batch 2 (both backends) and batch 8 (onnxrt) against HF, with the
# Linear op's reads of x from L1 (the default since 2026-12-07).
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
for m in t5-small bart-large; do
  t $m; timeout 150 python3 tools/bench/seq2seq_speed.py $OUT/$m --models $m --workdir /tmp/wdt --only tokens8-onnxrt,tokens --deadline 140 > $OUT/c-$m-tokens.log 2>&1; echo rc $?; grep -h '"model"' $OUT/c-$m-tokens.log
done
t done
