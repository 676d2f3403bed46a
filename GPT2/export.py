"""GPT2 export facts: the shared decoder export (NNDF.backends.onnx_export) needs nothing family-specific; the
fused decode graph of `onnxrt --fused-decode` is GPT2/fused_onnx.py's (GPT-2 architecture only)."""
from NNDF.backends.onnx_export import ExportSpec

EXPORT = ExportSpec(fused_decode="GPT2.fused_onnx:BUILDER")
