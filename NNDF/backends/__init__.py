"""Backends: kind-neutral runtimes, one folder each, all keeping one contract (`base.Backend`; their steps keep
the contracts of `NNDF.steps`: `GenerativeSteps`, `EncoderDecoderSteps`, `ForwardSteps`).

- `torch/`: `frameworks`, the HF PyTorch model itself.
- `onnxrt/`: a kind's exported ONNX graphs on ONNX Runtime (the shared exporter, quantization).
- `trt/`: TensorRT engines built from those graphs.
- `triton/`: the Triton client, a model served by Triton.

`NNDF.registry.BACKENDS` maps CLI names to these; each kind names its adapter for each backend (`Task.adapters`),
and each family's `frameworks.py` / `onnxrt.py` / `trt.py` declares what it adds there.
"""
