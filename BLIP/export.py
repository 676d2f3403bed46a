"""BLIP export facts: nothing family-specific (fp16 islands, if the vision encoder needs them, go here)."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
FUSED_DECODE = {"blip": "BLIP.fused_onnx:BUILDER"}  # HF model type -> its built graphs (a `Seq2SeqBuilder`)
