#!/bin/bash
# GPT-J / GPT-NeoX fused graphs on CUDA with the Linear op (tests); Qwen2.5-0.5B shapes: onnxrt (Linear op, the
# default) / onnxrt with ONNX Runtime's MatMul / frameworks / HF static, and the onnxrt step's kernels.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
df -h /tmp | tail -1
PAR="-n 3 --dist loadgroup"; python3 -c "import xdist" 2>/dev/null || PAR=""
t tests; HARNESS_TEST_DEVICE=cuda timeout 200 python3 -m pytest -q -rfs -s -p no:cacheprovider tests/test_rotary_fused_ort.py -k cuda > $OUT/a-tests-rotary.log 2>&1; echo rc $?; grep -E "fused graph vs HF|passed|failed|Error" $OUT/a-tests-rotary.log | tail -20
t qwen; timeout 260 python3 tools/bench/decoder_graphs.py $OUT/qwen --models qwen2.5-0.5b --row-variants "" --skip build,kernels,flash-matmul,step,loop,tokens,eager,batch8 --deadline 250 > $OUT/a-qwen.log 2>&1; echo rc $?
grep -h "|" $OUT/a-qwen.log | tail -8
t done
