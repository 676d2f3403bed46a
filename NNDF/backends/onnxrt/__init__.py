"""The `onnxrt` backend: ONNX Runtime (`backend.py`) over a kind's stored ONNX artifact (`artifact.py`), exported
with the shared exporter (`export.py`, fp32 islands: `precision.py`), optionally quantized (`quantize.py`,
`quantized.py`), run by sessions with IO binding (`steps.py`); its flags (`options.py`)."""
