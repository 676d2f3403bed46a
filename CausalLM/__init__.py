"""The decoder-only kind (GPT-2, OPT, BLOOM, ...): the task (`task.py`: prompts are the decoder's input, left
padded; `adapters` names what it runs on each backend) and, per backend, what differs:

- `frameworks.py` + `torch_steps.py`: the HF model's steps (dynamic or static cache, CUDA graphs, torch.compile,
  a family's fused step);
- `export.py`: the decoder graph with its KV cache (growing or static), validated against PyTorch;
- `onnxrt.py` + `ort_steps.py`: that graph as a stored artifact on ONNX Runtime; `ort_fused.py` + `fused_graph.py`:
  a family's fused decode graph (`--fused-decode`, ONNX Runtime's contrib operators; `graph_io.py`: the input
  names its builder and its steps share);
- `trt.py` + `trt_steps.py`: its TensorRT profiles and the steps over the engine.

Family folders hold only facts."""
