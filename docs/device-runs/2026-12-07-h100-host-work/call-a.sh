#!/bin/bash
# The generation loop's host-side changes on CUDA: EOS rows tracked on the device (rows ending at different steps,
# padded after), the processors made once per thread and settings, the ids written by torch on a device, the fused
# graphs' prompt binding made once per slot with its host scalars, the last position's logits in the slot's buffer.
# Every test file that runs the shared loop on CUDA against HF `generate` (frameworks and onnxrt, fp16 and fp32).
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 -c "import torch, transformers, onnxruntime as o; print('torch', torch.__version__, 'transformers', transformers.__version__, 'onnxruntime', o.__version__, o.get_available_providers())"
HARNESS_TEST_DEVICE=cuda timeout 540 python3 -m pytest -q -rfs -p no:cacheprovider tests/test_parity.py \
  tests/test_greedy_in_step.py tests/test_beam_graph.py tests/test_fused_decode_ort.py tests/test_llama_fused_ort.py \
  tests/test_static_cache.py > $OUT/a-tests.log 2>&1; echo rc $?
tail -25 $OUT/a-tests.log
