"""BLOOM export facts: the decoder-only kind's export (CausalLM/export.py) needs nothing family-specific; the fused
decode graph of `onnxrt --fused-decode` is BLOOM/fused_onnx.py's."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
FUSED_DECODE = {"bloom": "BLOOM.fused_onnx:BUILDER"}  # HF model type -> its fused graph builder (a `FusedBuilder`)
