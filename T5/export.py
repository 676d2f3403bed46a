"""T5 export facts: fp16 keeps the feed-forward output projections (`wo`) in fp32.

T5's activations overflow fp16 in the feed-forward output (HF keeps `wo` fp32 for the same reason:
`T5PreTrainedModel._keep_in_fp32_modules`); its RMS norm already computes the variance in fp32 and HF clamps
fp16 hidden states near the fp16 maximum, and both are traced into the graph as they are. Declaring `wo` here
makes the island explicit in the ONNX (so strongly typed TensorRT builds it in fp32) whatever dtype the
weights were loaded in. The fp16 tolerance is relative to the logits' scale (see docs/VERIFICATION.md).
"""
from NNDF.backends.onnxrt.export import ExportSpec

EXPORT = ExportSpec(fp32_modules=("wo",))
FUSED_DECODE = {"t5": "T5.fused_onnx:BUILDER"}  # HF model type -> its built graphs (a `Seq2SeqBuilder`)
