"""The decoder-only kind (GPT-2, OPT, BLOOM, ...): the task (`task.py`: prompts are the decoder's input, left
padded) and what it supplies to each backend: `frameworks.py` (the HF model's steps, or a family's fused step),
`export.py` (the decoder graph with its KV cache, growing or static, validated against PyTorch), `onnxrt.py` (that
graph as a stored artifact on ONNX Runtime) and `trt.py` (its TensorRT profiles and steps). Family folders hold
only facts."""
