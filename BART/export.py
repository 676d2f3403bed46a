"""BART export facts: HF BART clamps fp16 activations only when some are not finite, a data-dependent branch
torch.export cannot trace; fp16 exports clamp unconditionally instead (as HF's mBART always does), which is the
same result below the clamp bound (see NNDF/backends/onnxrt/precision.py). fp32 exports are unaffected."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec(fp16_clamp_always=True)
FUSED_DECODE = {"bart": "BART.fused_onnx:BUILDER", "mbart": "BART.fused_onnx:BUILDER"}  # HF model type -> its built graphs
