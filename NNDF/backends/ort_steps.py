"""`onnxrt` step functions: an exported decoder graph on ONNX Runtime behind the step contract.

`OrtGraph` runs one session. On the CPU, torch tensors and numpy arrays share memory, so feeding the session and
wrapping its outputs copies nothing. On CUDA, IO binding hands ONNX Runtime torch-allocated device buffers by
pointer for every input and output, and ONNX Runtime runs on torch's current stream: tokens, masks and cache
never visit the host. `OrtSteps` is the decoder-only contract over one graph; its cache is a tuple of torch
tensors (present.* of the previous step become past.* of the next).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from NNDF.errors import ArtifactError, BackendUnavailable

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64}
_TORCH = {np.float32: torch.float32, np.float16: torch.float16, np.int64: torch.int64}


def make_session(path: Path, device: torch.device, threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    ort.set_default_logger_severity(3)  # ORT warns about plugin EP discovery on every session otherwise
    if threads:
        options.intra_op_num_threads = threads
    if device.type == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise BackendUnavailable(
                "onnxrt on cuda needs onnxruntime-gpu (this onnxruntime has "
                f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or use --device cpu")
        stream = torch.cuda.current_stream(device).cuda_stream
        # use_tf32=0: fp32 means fp32 (TF32 matmuls differ from PyTorch's fp32 by ~5e-3 on GPT-2 logits)
        providers = [("CUDAExecutionProvider", {"device_id": device.index or 0, "user_compute_stream": str(stream),
                                                "use_tf32": "0"})]
    else:
        providers = ["CPUExecutionProvider"]
    try:
        return ort.InferenceSession(str(path), options, providers=providers)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable/invalid models
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"ONNX Runtime cannot load {path}: {first}") from None


class OrtGraph:
    """One ONNX Runtime session: named torch tensors in, torch tensors out (in the graph's output order).

    On the CPU, torch tensors and numpy arrays share memory. On CUDA every input and output is a torch device
    buffer bound by pointer; output shapes come from the graph's named dimensions, whose sizes are read off
    the bound inputs (plus `extra_dims` for names only outputs have, e.g. "total" = past + new tokens).
    """

    def __init__(self, path: Path, device: torch.device, threads: int = 0):
        self.path, self.device = path, device
        self.session = make_session(path, device, threads)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = {o.name: o for o in self.session.get_outputs()}
        self.output_names = list(self.outputs)

    def dtype(self, name: str) -> torch.dtype:
        meta = self.inputs.get(name) or self.outputs[name]
        return _TORCH[_NP[meta.type]]

    def run(self, feeds: dict, extra_dims: dict | None = None) -> list[torch.Tensor]:
        if self.device.type != "cuda":
            arrays = {k: v.contiguous().numpy() for k, v in feeds.items()}
            return [torch.from_numpy(a) for a in self.session.run(self.output_names, arrays)]
        feeds = {k: v.contiguous() for k, v in feeds.items()}  # kept alive until the run ends
        binding = self.session.io_binding()
        index = self.device.index or 0
        dims = dict(extra_dims or {})
        for name, tensor in feeds.items():
            for label, size in zip(self.inputs[name].shape, tensor.shape):
                if isinstance(label, str):
                    dims[label] = size
            binding.bind_input(name, "cuda", index, _NP[self.inputs[name].type], tuple(tensor.shape),
                               tensor.data_ptr())
        outputs = [torch.empty(self._shape(name, dims), dtype=self.dtype(name), device=self.device)
                   for name in self.output_names]
        for name, tensor in zip(self.output_names, outputs):
            binding.bind_output(name, "cuda", index, _NP[self.outputs[name].type], tuple(tensor.shape),
                                tensor.data_ptr())
        self.session.run_with_iobinding(binding)
        return outputs

    def _shape(self, name: str, dims: dict) -> tuple[int, ...]:
        shape = []
        for label in self.outputs[name].shape:
            if isinstance(label, int):
                shape.append(label)
            elif label in dims:
                shape.append(dims[label])
            else:
                raise ArtifactError(f"{self.path}: cannot size output {name!r}: its dimension {label!r} is not an "
                                    "input dimension (graphs not exported by this harness need matching names)")
        return tuple(shape)

    def close(self) -> None:
        self.session = None


class OrtSteps:
    name = "onnxrt"

    def __init__(self, path: Path, device: torch.device, use_cache: bool, threads: int = 0):
        self.device, self.use_cache = device, use_cache
        self.graph = OrtGraph(path, device, threads)
        self.inputs, self.output_names = self.graph.inputs, self.graph.output_names
        self._check_signature(path)
        self.past_names = [n for n in self.inputs if n.startswith("past.")]
        self.takes_positions = "position_ids" in self.inputs

    def _check_signature(self, path: Path) -> None:
        has_past = any(n.startswith("past.") for n in self.inputs)
        missing = {"input_ids", "attention_mask"} - set(self.inputs)
        if missing or self.output_names[0] != "logits" or has_past != self.use_cache:
            want = "with" if self.use_cache else "without"
            raise ArtifactError(
                f"{path} is not a decoder graph {want} KV cache as this harness exports it "
                f"(inputs: {', '.join(self.inputs)}; outputs: {', '.join(self.output_names[:3])}...)")

    def new_cache(self, batch: int, max_length: int):
        if not self.use_cache:
            return None
        return tuple(empty_past(self.inputs[name], batch, self.graph.dtype(name), self.device)
                     for name in self.past_names)

    def reorder_cache(self, cache, index):
        return tuple(t.index_select(0, index) for t in cache)

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        # the graph always computes logits for every position (accuracy needs them); `last_only` is a hint
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.takes_positions:
            feeds["position_ids"] = position_ids
        if self.use_cache:
            feeds.update(zip(self.past_names, cache))
        outputs = self.graph.run(feeds, {"total": attention_mask.shape[1]})
        return outputs[0], (tuple(outputs[1:]) if self.use_cache else None)

    def close(self) -> None:
        self.graph.close()


def empty_past(meta, batch: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A cache tensor with no positions yet [batch, heads, 0, head_dim] (heads and head_dim from the graph)."""
    _, heads, _, head_dim = meta.shape
    return torch.zeros(batch, heads, 0, head_dim, dtype=dtype, device=device)
