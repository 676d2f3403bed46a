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

`KVBuffers` and `TrtSteps` hold the bookkeeping (shapes, views, swaps, profiles) and reach the engine only
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


class TrtSteps:
    """DecoderSteps over an engine (profile 0: prompt pass, 1: one-token steps; one profile without a cache).
    All bookkeeping lives here; the engine calls live in `EngineIO`."""

    name = "trt"

    def __init__(self, io: EngineIO, device: torch.device, use_cache: bool, max_rows: int, max_total: int):
        self.io, self.device, self.use_cache = io, torch.device(device), use_cache
        self.past_names = [n for n in io.inputs if n.startswith("past.")]
        self.present_names = [n for n in io.outputs if n.startswith("present.")]
        self.vocab = io.shape("logits")[-1]
        self.logits = torch.empty(max_rows * max_total * self.vocab, dtype=io.dtype("logits"), device=device)
        # static input buffers: fixed addresses, so a captured CUDA graph reads this step's tokens
        self.static = {n: torch.empty(max_rows * max_total, dtype=io.dtype(n), device=device)
                       for n in ("input_ids", "attention_mask", "position_ids", "cache_position") if n in io.inputs}
        self.static_cache = "cache_position" in io.inputs
        self.kv = None
        if use_cache:
            dims = [tuple(io.shape(n))[1::2] for n in self.past_names]  # (heads, head_dim)
            self.kv = KVBuffers(dims, max_rows, max_total, io.dtype(self.past_names[0]), device)
        self.profile = -1

    def new_cache(self, batch: int, max_length: int):
        if not self.use_cache:
            return None
        return TrtCache(batch, 0, max_length if self.static_cache else 0)

    def reorder_cache(self, cache: TrtCache, index: torch.Tensor) -> TrtCache:
        self.kv.reorder(index, cache.rows, cache.capacity or cache.length)
        return TrtCache(len(index), cache.length, cache.capacity)

    def _select_profile(self, profile: int) -> None:
        if profile != self.profile:
            self.io.select_profile(profile)
            self.profile = profile

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        rows, seq = input_ids.shape
        past = cache.length if self.use_cache else 0
        total = attention_mask.shape[1]
        self._select_profile(1 if self.use_cache and past > 0 else 0)
        width = cache.capacity if self.static_cache else total  # the cache tensors' length
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        if self.static_cache:  # full-width mask, 1 beyond the written columns (the causal mask hides them)
            feeds["attention_mask"] = torch.nn.functional.pad(attention_mask, (0, width - total), value=1)
        for name, buffer in self.static.items():
            if name == "cache_position":  # where this pass's first token goes: a scalar
                view = buffer[:1].view(())
                view.fill_(past)
            else:
                value = feeds[name]
                view = buffer[: value.numel()].view(value.shape)
                view.copy_(value)  # device to device; the host never sees the tokens
            self.io.bind(name, view, True)
        logits = self.logits[: rows * seq * self.vocab].view(rows, seq, self.vocab)
        self.io.bind("logits", logits, False)
        if self.use_cache:
            for name, tensor in zip(self.past_names, self.kv.past(rows, width if self.static_cache else past)):
                self.io.bind(name, tensor, True)
            for name, tensor in zip(self.present_names, self.kv.present(rows, width)):
                self.io.bind(name, tensor, False)
        one_token_step = self.use_cache and seq == 1 and past > 0
        key = (rows, width if self.static_cache else past, self.kv.current) if one_token_step else None
        self.io.execute(key)
        if not self.use_cache:
            return logits, None
        self.kv.swap()
        return logits, TrtCache(rows, total, cache.capacity)

    def close(self) -> None:
        self.io, self.kv, self.logits, self.static = None, None, None, None


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
