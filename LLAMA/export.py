"""LLAMA export facts: the decoder-only kind's export (CausalLM/export.py) needs nothing family-specific; the fused
decode graph of `onnxrt --fused-decode` is LLAMA/fused_onnx.py's (every model type but the Gemmas': `FUSED_TYPES`)."""
from LLAMA.config import FUSED_TYPES
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
# HF model type -> its fused graph builder (a `FusedBuilder`)
FUSED_DECODE = {model_type: "LLAMA.fused_onnx:BUILDER" for model_type in FUSED_TYPES}
