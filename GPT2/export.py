"""GPT2 export facts: the decoder export (CausalLM/export.py) needs nothing family-specific; the fused decode
graph of `onnxrt --fused-decode` is GPT2/fused_onnx.py's (GPT-2 architecture only)."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
FUSED_DECODE = {"gpt2": "GPT2.fused_onnx:BUILDER"}  # HF model type -> its fused graph builder (a `FusedBuilder`)
