"""OPT export facts: the decoder-only kind's export (CausalLM/export.py) needs nothing family-specific; the fused
decode graph of `onnxrt --fused-decode` is OPT/fused_onnx.py's."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
FUSED_DECODE = {"opt": "OPT.fused_onnx:BUILDER"}  # HF model type -> its fused graph builder (a `FusedBuilder`)
