"""`trt` step functions: a TensorRT engine behind the step contract, with device-resident buffers.

Every buffer is a torch tensor allocated once at the profile maxima and bound by pointer:
- KV cache: two flat buffers per past/present tensor ("ping-pong"). A step reads past.* from one buffer and
  TensorRT writes present.* (past + new tokens) into the other, then they swap: no copies, no host traffic.
  Views are the leading `rows * heads * length * head_dim` elements, so each view is contiguous.
- Beam reordering gathers rows on the device into the idle buffer, then swaps.
- Logits: one flat buffer viewed as [rows, seq, vocab] (valid until the next call).
Execution is enqueued on torch's current stream. With `use_cuda_graph`, a one-token step is captured once
per (rows, past length, buffer parity) and replayed: inputs are copied into static buffers first.
- Static-cache engines (built from the `--static-cache` graph: a `cache_position` input, past/present and mask of
  the generation's full length) have the same shapes at every one-token step: a graph per (rows, length,
  parity), i.e. two per generation shape instead of two per position. The buffers start zeroed (unwritten
  positions are masked, but 0 x NaN would still be NaN) and each step carries the whole cache to the other
  buffer (TensorRT cannot write an input in place).

`KVBuffers` and the kinds' steps (`CausalLM.trt_steps.TrtSteps`, `Seq2Seq.trt_steps`) hold the bookkeeping (shapes, views, swaps, profiles) and reach the engine only
through `EngineIO`, so they are tested on the CPU with ONNX Runtime standing in for the engine
(tests/test_trt.py); `TensorRTIO` is the part that only a GPU with a working TensorRT can exercise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from NNDF.errors import InferenceError, UsageError


@dataclass(frozen=True)
class TrtCache:
    """What the generation loop holds for a TensorRT run: rows and cached length (the data stays in KVBuffers);
    `capacity`: a static cache's full length (0: the cache grows)."""

    rows: int
    length: int
    capacity: int = 0


class KVBuffers:
    """Ping-pong past/present buffers for every cache tensor; `dims[i] = (heads, head_dim)`."""

    def __init__(self, dims: list[tuple[int, int]], max_rows: int, max_total: int, dtype, device):
        self.dims, self.max_rows, self.max_total = dims, max_rows, max_total
        size = lambda h, d: max_rows * h * max_total * d  # noqa: E731
        self.buffers = [[torch.zeros(size(h, d), dtype=dtype, device=device) for h, d in dims] for _ in range(2)]
        self.current = 0  # index of the buffer set holding the cache

    def _views(self, which: int, rows: int, length: int) -> list[torch.Tensor]:
        if rows > self.max_rows or length > self.max_total:
            raise UsageError(f"{rows} rows x {length} positions exceed the engine's profile maxima "
                             f"({self.max_rows} x {self.max_total}); rebuild with larger profiles")
        return [buf[: rows * h * length * d].view(rows, h, length, d)
                for buf, (h, d) in zip(self.buffers[which], self.dims)]

    def past(self, rows: int, length: int) -> list[torch.Tensor]:
        return self._views(self.current, rows, length)

    def present(self, rows: int, length: int) -> list[torch.Tensor]:
        return self._views(1 - self.current, rows, length)

    def swap(self) -> None:
        self.current = 1 - self.current

    def reorder(self, index: torch.Tensor, rows: int, length: int) -> None:
        """Rows `index` [N] of the `rows`-row cache become the cache (N up to max_rows), on the device."""
        for src, dst in zip(self.past(rows, length), self.present(len(index), length)):
            torch.index_select(src, 0, index, out=dst)
        self.swap()


class EngineIO(Protocol):
    """What TrtSteps needs from an engine: tensor facts, shape/address binding, profile choice, execution.
    `TensorRTIO` is the real one; anything with these methods can stand in (tests use ONNX Runtime)."""

    inputs: list[str]
    outputs: list[str]

    def shape(self, name: str) -> tuple[int, ...]: ...  # -1 for dynamic dimensions

    def dtype(self, name: str) -> torch.dtype: ...

    def select_profile(self, index: int) -> None: ...

    def bind(self, name: str, tensor: torch.Tensor, is_input: bool) -> None: ...

    def execute(self, graph_key=None) -> None: ...  # graph_key: capture / replay a CUDA graph under this key


class TensorRTIO:
    """EngineIO over a TensorRT (or TensorRT-RTX) engine, on torch's current CUDA stream."""

    def __init__(self, trt, engine, device: torch.device, use_cuda_graph: bool = False):
        self.trt, self.engine, self.device = trt, engine, device
        self.context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = lambda n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT  # noqa: E731
        self.inputs = [n for n in names if is_input(n)]
        self.outputs = [n for n in names if not is_input(n)]
        self.graphs = {} if use_cuda_graph else None

    def shape(self, name):
        return tuple(self.engine.get_tensor_shape(name))

    def dtype(self, name):
        trt = self.trt
        return {trt.float32: torch.float32, trt.float16: torch.float16, trt.int64: torch.int64,
                trt.int32: torch.int32}[self.engine.get_tensor_dtype(name)]

    def _stream(self) -> int:
        return torch.cuda.current_stream(self.device).cuda_stream

    def select_profile(self, index):
        self.context.set_optimization_profile_async(index, self._stream())

    def bind(self, name, tensor, is_input):
        if is_input:
            self.context.set_input_shape(name, tuple(tensor.shape))
        self.context.set_tensor_address(name, tensor.data_ptr())

    def execute(self, graph_key=None):
        if self.graphs is None or graph_key is None:
            if not self.context.execute_async_v3(self._stream()):
                raise InferenceError("TensorRT execute_async_v3 failed for this engine")
            return
        graph = self.graphs.get(graph_key)
        if graph is None:  # first time for this shape and buffer parity: run once (shape setup), then capture
            self.context.execute_async_v3(self._stream())
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):  # torch captures on its own side stream
                self.context.execute_async_v3(self._stream())
            self.graphs[graph_key] = graph
        graph.replay()
