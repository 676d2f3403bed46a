#!/bin/bash
# benchmark --interleave on CUDA: GPT-2 124M shapes fp16, frameworks (fused step, CUDA graph, compile) and onnxrt
# (the fused graph, CUDA graph) set up at once and timed in turns, HF static before them; then the same rows one
# after the other.
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
t shapes; python3 tools/assets/make_shapes_model.py gpt2 /tmp/shapes/gpt2 > $OUT/shapes.log 2>&1; echo rc $?
F="GPT2 frameworks onnxrt --torch-dir /tmp/shapes/gpt2 --fp16 --static-cache --use-cuda-graph --torch-compile --fused-decode --input-seq-len 128 --output-seq-len 128 --iterations 20 -wd /tmp/wd"
t interleaved; timeout 280 python3 run.py benchmark $F --interleave --hf-baseline --json $OUT/gpt2-interleaved.json > $OUT/gpt2-interleaved.log 2>&1; echo rc $?
grep -E "^\||^note: (interleaved|memory)|^error" $OUT/gpt2-interleaved.log
t sequential; timeout 200 python3 run.py benchmark $F --json $OUT/gpt2-sequential.json > $OUT/gpt2-sequential.log 2>&1; echo rc $?
grep -E "^\||^note: memory|^error" $OUT/gpt2-sequential.log
t done
