"""GPT2 export facts: the decoder export (CausalLM/export.py) needs nothing family-specific; the fused decode
graphs of `onnxrt --fused-decode` are GPT2/fused_onnx*.py's, one builder per HF model type (`FUSED_DECODE`)."""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec()
FUSED_DECODE = {  # HF model type -> its fused graph builder (a `FusedBuilder`)
    "gpt2": "GPT2.fused_onnx:BUILDER",
    "gptj": "GPT2.fused_onnx_gptj:BUILDER",
    "gpt_neox": "GPT2.fused_onnx_neox:BUILDER",
    "gpt_neo": "GPT2.fused_onnx_neo:BUILDER",
}
