"""The `trt` backend: TensorRT engines built from a kind's ONNX artifact, cached with a fingerprint (`backend.py`),
the TensorRT API (`engine.py`), shapes and profiles without TensorRT (`profiles.py`), buffers and IO over a loaded
engine (`steps.py`); its flags (`options.py`)."""
