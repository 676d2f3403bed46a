"""Backends: one contract (`NNDF.steps.DecoderSteps`), three implementations.

- `frameworks`: the HF PyTorch model itself (`torch_steps.py`).
- `onnxrt`: an exported ONNX graph on ONNX Runtime (`onnx_export.py`, `ort_steps.py`).
- `trt`: TensorRT engines (added by the TensorRT issue).

`NNDF.registry` maps CLI names to these; a family's `frameworks.py` / `onnxrt.py` bind them to the family.
"""
