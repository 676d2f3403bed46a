#!/bin/bash
# The fused decode graphs with the logits_start input on CUDA (fp16): every family's fused-graph tests (CUDA-graph
# step = uncaptured, tokens against HF fp16, the last-position prompt pass), then Qwen2.5-0.5B shapes' rows.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
t tests; HARNESS_TEST_DEVICE=cuda timeout 280 python3 -m pytest -q -rfs -s -p no:cacheprovider tests/test_fused_decode_ort.py tests/test_llama_fused_ort.py tests/test_rotary_fused_ort.py tests/test_opt_fused_ort.py tests/test_bloom_fused_ort.py tests/test_neo_fused_ort.py > $OUT/a-tests.log 2>&1; echo rc $?; grep -E "fused graph vs HF|passed|failed|Error" $OUT/a-tests.log | tail -25
t qwen; timeout 250 python3 tools/bench/decoder_graphs.py $OUT/qwen --models qwen2.5-0.5b --row-variants "" --skip build,kernels,onnxrt-matmul,flash-matmul,step,loop,tokens,eager,batch8 --deadline 240 > $OUT/a-qwen.log 2>&1; echo rc $?
grep -h "|" $OUT/a-qwen.log | tail -8
t done
