"""`onnxrt` step functions: one exported graph per session on ONNX Runtime, for every kind's steps.

`OrtGraph` runs one session. On the CPU, torch tensors and numpy arrays share memory, so feeding the session and
wrapping its outputs copies nothing. On CUDA, IO binding hands ONNX Runtime torch-allocated device buffers by
pointer for every input and output, and ONNX Runtime runs on a stream of the session's own: each run waits for
torch's current stream, and torch's stream waits for the run. Tokens, masks and cache never visit the host.
`CausalLM.ort_steps.OrtSteps` is the decoder-only contract over one graph; its cache is a tuple of torch tensors
(present.* of the previous step become past.* of the next), or for a static-cache graph (one with a `cache_position`
input) a `NNDF.slots.KVSlot`: full-length buffers bound as both past and present, so the graph writes the new keys
and values in place and every one-token step has the same shapes and addresses. With `cuda_graph`, ONNX Runtime
captures that step once per slot (its CUDA-graph mode, `gpu_graph_id` = the slot's id) and replays it; the prompt
pass runs uncaptured (`gpu_graph_id` -1).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from NNDF.backends.onnxrt import custom_ops
from NNDF.errors import ArtifactError, BackendUnavailable

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
       "tensor(int32)": np.int32}
_TORCH = {np.float32: torch.float32, np.float16: torch.float16, np.int64: torch.int64, np.int32: torch.int32}


@dataclass(frozen=True)
class TensorMeta:
    """A graph input's or output's name, shape (ints and dimension names) and ONNX Runtime type string."""

    name: str
    shape: tuple
    type: str


# ONNX Runtime's settings for CPU sessions (the values are strings: `tools/bench/cpu_compare.py` changes them per
# row, `row@key=value`, which is how they were chosen; docs/PERFORMANCE.md):
# - spinning: the intra-op pool's threads busy-wait for work after each parallel section ("1", ONNX Runtime's
#   default: faster on an idle machine, GPT-2 124M fp32 +7%, MiniLM +20%) or sleep ("0": 1.5x faster on 2 cores
#   that other processes share)
# - mem_pattern: plan the memory of repeated shapes ("1", the default) or not ("0")
# - optimization: the graph optimization level (all, extended, basic, disable)
# - execution: sequential or parallel (an inter-op pool besides the intra-op one)
# - spin_us: with spinning, how long a thread spins before it sleeps ("": ONNX Runtime's default)
# - dynamic_block: `session.dynamic_block_base`, parallel loops split into shrinking blocks threads take as they
#   come ("0": off, the default: equal static blocks)
# - unfused: ONNX Runtime's graph transformers left out, comma-separated ("SkipLayerNormFusion", the default: its
#   CPU SkipLayerNormalization is slower than the Adds and LayerNormalization it replaces, MiniLM's twelve took 9.5
#   of a 66.0 ms forward at 8 x 128, which ran 57.3 ms without them; GPT-2's generation is level either way;
#   docs/PERFORMANCE.md; "": none)
CPU_SESSION = {"spinning": "1", "mem_pattern": "1", "optimization": "all", "execution": "sequential", "spin_us": "",
               "dynamic_block": "0", "unfused": "SkipLayerNormFusion"}


def _graph_level(ort, name: str):
    levels = {"all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
              "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
    return levels[name]


def make_session(path: Path, device: torch.device, threads: int = 0, stream=None, cuda_graph: bool = False):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    ort.set_default_logger_severity(3)  # ORT warns about plugin EP discovery on every session otherwise
    if threads:
        options.intra_op_num_threads = threads
    unfused: list[str] = []  # graph transformers ONNX Runtime leaves out
    if device.type == "cpu":
        cpu = CPU_SESSION
        unfused = [name for name in cpu["unfused"].split(",") if name]
        options.add_session_config_entry("session.intra_op.allow_spinning", cpu["spinning"])
        options.add_session_config_entry("session.inter_op.allow_spinning", cpu["spinning"])
        options.enable_mem_pattern = cpu["mem_pattern"] == "1"
        options.graph_optimization_level = _graph_level(ort, cpu["optimization"])
        if cpu["spin_us"]:
            options.add_session_config_entry("session.intra_op.spin_duration_us", cpu["spin_us"])
        if cpu["dynamic_block"] != "0":
            options.add_session_config_entry("session.dynamic_block_base", cpu["dynamic_block"])
        if cpu["execution"] == "parallel":
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if device.type == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise BackendUnavailable(
                "onnxrt on cuda needs onnxruntime-gpu (this onnxruntime has "
                f"{', '.join(ort.get_available_providers())}); install onnxruntime-gpu or use --device cpu")
        # GroupQueryAttention's one-token steps: ONNX Runtime's flash decoding, not its XQA kernels (on by default
        # for fp16; read when the session is made), measured 3-5% faster per step on an H100 at OPT-6.7B, GPT-J-6B
        # and Llama-3-8B shapes and the same at BLOOM-7B1 and GPT-NeoX-20B (docs/PERFORMANCE.md); a value the user
        # sets wins
        os.environ.setdefault("ORT_ENABLE_XQA", "0")
        # `stream` (a torch.cuda.Stream, never the legacy default stream): ONNX Runtime takes a null handle for "no
        # stream given" and runs on a non-blocking stream of its own, which nothing orders against torch's work (a
        # step could read inputs torch has not written yet: seen as wrong logits on a busy GPU); CUDA graphs cannot
        # be captured on the legacy default stream either
        if stream is None or not stream.cuda_stream:
            raise ValueError("an ONNX Runtime CUDA session needs a torch.cuda.Stream of its own")
        # use_tf32=0: fp32 means fp32 (TF32 matmuls differ from PyTorch's fp32 by ~5e-3 on GPT-2 logits)
        cuda = {"device_id": str(device.index or 0), "user_compute_stream": str(stream.cuda_stream), "use_tf32": "0",
                # the arena grows by what is asked, not by powers of two: a 20B model's weights would otherwise
                # reserve far more than they take on an 80 GB card
                "arena_extend_strategy": "kSameAsRequested"}
        # weights take device memory of their own size, outside the arena (freed with the session)
        options.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
        if cuda_graph:
            cuda["enable_cuda_graph"] = "1"
        providers = [("CUDAExecutionProvider", cuda)]
    else:
        providers = ["CPUExecutionProvider"]
    library = Path(path).with_name(custom_ops.FILE)  # a graph that uses this project's ops carries their library
    if library.is_file():
        custom_ops.register(options, library)
    try:
        return ort.InferenceSession(str(path), options, providers=providers, disabled_optimizers=unfused)
    except Exception as exc:  # onnxruntime raises its own exception types for unreadable/invalid models
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ArtifactError(f"ONNX Runtime cannot load {path}: {first}") from exc


class OrtGraph:
    """One ONNX Runtime session: named torch tensors in, torch tensors out (in the graph's output order).

    On the CPU, torch tensors and numpy arrays share memory. On CUDA every input and output is a torch device
    buffer bound by pointer; output shapes come from the graph's named dimensions, whose sizes are read off
    the bound inputs (plus `extra_dims` for names only outputs have, e.g. "total" = past + new tokens).
    """

    def __init__(self, path: Path, device: torch.device, threads: int = 0, cuda_graph: bool = False,
                 host_inputs: frozenset[str] = frozenset()):
        self.path, self.device = path, device
        self.host_inputs = host_inputs  # inputs a kernel reads on the CPU: bound in host memory
        self.cuda_graph = cuda_graph
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None  # the session's (`run_bound`)
        self.session = make_session(path, device, threads, self.stream, cuda_graph)
        # plain copies of the graph's input / output metadata: ONNX Runtime's NodeArg objects keep the session (and
        # its device memory) alive as long as any of them lives
        self.inputs = {i.name: TensorMeta(i.name, tuple(i.shape), i.type) for i in self.session.get_inputs()}
        self.outputs = {o.name: TensorMeta(o.name, tuple(o.shape), o.type) for o in self.session.get_outputs()}
        self.output_names = list(self.outputs)

    def dtype(self, name: str) -> torch.dtype:
        meta = self.inputs.get(name) or self.outputs[name]
        return _TORCH[_NP[meta.type]]

    def run(self, feeds: dict, extra_dims: dict | None = None, outputs: dict | None = None,
            graph_id: int = -1) -> list[torch.Tensor]:
        """Outputs in graph order; `outputs` names buffers to write into (bound by pointer, e.g. a static cache's
        own buffers), `graph_id` the CUDA graph to capture or replay (-1: none; needs a `cuda_graph` session)."""
        if self.device.type != "cuda" and not outputs:
            arrays = {k: v.contiguous().numpy() for k, v in feeds.items()}
            return [torch.from_numpy(a) for a in self.session.run(self.output_names, arrays)]
        feeds = {k: v.contiguous() for k, v in feeds.items()}  # kept alive until the run ends
        dims = dict(extra_dims or {})
        for name, tensor in feeds.items():
            for label, size in zip(self.inputs[name].shape, tensor.shape):
                if isinstance(label, str):
                    dims[label] = size
        given = outputs or {}
        results = [given[name] if name in given else
                   torch.empty(self._shape(name, dims), dtype=self.dtype(name), device=self.device)
                   for name in self.output_names]
        binding = self.bind(feeds, dict(zip(self.output_names, results)))
        self.run_bound(binding, self.run_options(graph_id) if self.cuda_graph else None)
        return results

    def bind(self, feeds: dict, outputs: dict, binding=None):
        """An IO binding of these device tensors by pointer (the tensors must outlive its runs: a CUDA graph's
        slot binds its fixed buffers once and reruns the binding); `binding`: one to bind them into, which keeps
        what it had bound under other names."""
        binding = binding or self.session.io_binding()
        place, index = self.device.type, self.device.index or 0
        for name, tensor in feeds.items():
            if tensor.device.type == "cpu" and tensor.is_contiguous():
                # the array's own memory, not a copy: a third of the pointer binding's host time (which a prompt
                # pass spends on cold caches at a generation's start)
                binding.bind_cpu_input(name, tensor.numpy())
            else:
                where = ("cpu", 0) if name in self.host_inputs else (place, index)
                binding.bind_input(name, *where, _NP[self.inputs[name].type], tuple(tensor.shape), tensor.data_ptr())
        for name, tensor in outputs.items():
            binding.bind_output(name, place, index, _NP[self.outputs[name].type], tuple(tensor.shape),
                                tensor.data_ptr())
        return binding

    @staticmethod
    @functools.cache
    def run_options(graph_id: int):
        """Run options naming the CUDA graph to capture or replay (-1: none), made once per id. A captured
        step's run does not wait for the GPU at its end (`disable_synchronize_execution_providers`, which ONNX
        Runtime honours for CUDA-graph replays since microsoft/onnxruntime#28686): its inputs and outputs are
        bound device buffers, ordered against torch's stream by `run_bound`, so the host can queue the next
        token's work while this step runs. Uncaptured runs keep the synchronisation (they may allocate)."""
        import onnxruntime as ort

        options = ort.RunOptions()
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        if graph_id >= 0:
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        return options

    def run_bound(self, binding, run_options=None) -> None:
        """Run a binding; on CUDA on the session's own stream, ordered after and before torch's current stream."""
        if self.stream is None:
            self.session.run_with_iobinding(binding)
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)  # inputs written by torch are ready
        self.session.run_with_iobinding(binding, run_options)
        current.wait_stream(self.stream)

    def output_shape(self, name: str, feeds: dict) -> tuple[int, ...]:
        """The shape output `name` will have for these inputs (its named dimensions read off the inputs')."""
        dims = {label: size for key, tensor in feeds.items()
                for label, size in zip(self.inputs[key].shape, tensor.shape) if isinstance(label, str)}
        return self._shape(name, dims)

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
        """Drop the session; its device memory goes back now (the caller may load another copy of the model)."""
        import gc

        self.session = None
        gc.collect()


def empty_past(meta, batch: int, dtype: torch.dtype, device, length: int = 0) -> torch.Tensor:
    """A cache tensor [batch, heads, length, head_dim] of zeros (heads and head_dim from the graph): no
    positions yet, or a static cache's full length."""
    _, heads, _, head_dim = meta.shape
    return torch.zeros(batch, heads, length, head_dim, dtype=dtype, device=device)
