"""`trt` step functions: a TensorRT engine behind the step contract, with device-resident buffers.

Every buffer is a torch tensor allocated once at the profile maxima and bound by pointer:
- KV cache: two flat buffers per past/present tensor ("ping-pong"). A step reads past.* from one buffer and
  TensorRT writes present.* (past + new tokens) into the other, then they swap: no copies, no host traffic.
  Views are the leading `rows * heads * length * head_dim` elements, so each view is contiguous.
- Beam reordering gathers rows on the device into the idle buffer, then swaps.
- Logits: one flat buffer viewed as [rows, seq, vocab] (valid until the next call).
Execution is enqueued on torch's current stream. With `use_cuda_graph`, a one-token step is captured once
per (rows, past length, buffer parity) and replayed: inputs are copied into static buffers first.

`KVBuffers` holds the bookkeeping (shapes, views, swaps) and needs no TensorRT, so it is tested on the CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from NNDF.errors import UsageError


@dataclass(frozen=True)
class TrtCache:
    """What the generation loop holds for a TensorRT run: rows and cached length (the data stays in KVBuffers)."""

    rows: int
    length: int


class KVBuffers:
    """Ping-pong past/present buffers for every cache tensor; `dims[i] = (heads, head_dim)`."""

    def __init__(self, dims: list[tuple[int, int]], max_rows: int, max_total: int, dtype, device):
        self.dims, self.max_rows, self.max_total = dims, max_rows, max_total
        size = lambda h, d: max_rows * h * max_total * d  # noqa: E731
        self.buffers = [[torch.empty(size(h, d), dtype=dtype, device=device) for h, d in dims] for _ in range(2)]
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


class TrtSteps:
    """DecoderSteps over a deserialized engine (profile 0: prompt pass, 1: one-token steps; or one profile
    without a cache)."""

    name = "trt"

    def __init__(self, trt, engine, device: torch.device, use_cache: bool, max_rows: int, max_total: int,
                 use_cuda_graph: bool = False):
        self.trt, self.engine, self.device, self.use_cache = trt, engine, device, use_cache
        self.context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.past_names = [n for n in self.inputs if n.startswith("past.")]
        self.present_names = [n for n in names if n.startswith("present.")]
        self.takes_positions = "position_ids" in self.inputs
        self.vocab = engine.get_tensor_shape("logits")[-1]
        dtype = _torch_dtype(trt, engine.get_tensor_dtype("logits"))
        self.logits = torch.empty(max_rows * max_total * self.vocab, dtype=dtype, device=device)
        # static input buffers: fixed addresses, so a captured CUDA graph reads this step's tokens
        self.static = {n: torch.empty(max_rows * max_total, dtype=_torch_dtype(trt, engine.get_tensor_dtype(n)),
                                      device=device) for n in ("input_ids", "attention_mask", "position_ids")
                       if n in self.inputs}
        self.kv = None
        if use_cache:
            dims = [tuple(engine.get_tensor_shape(n))[1::2] for n in self.past_names]  # (heads, head_dim)
            kv_dtype = _torch_dtype(trt, engine.get_tensor_dtype(self.past_names[0]))
            self.kv = KVBuffers(dims, max_rows, max_total, kv_dtype, device)
        self.profile = -1
        self.graphs = {} if use_cuda_graph else None

    def new_cache(self, batch: int):
        return TrtCache(batch, 0) if self.use_cache else None

    def reorder_cache(self, cache: TrtCache, index: torch.Tensor) -> TrtCache:
        self.kv.reorder(index, cache.rows, cache.length)
        return TrtCache(len(index), cache.length)

    def _select_profile(self, profile: int, stream: int) -> None:
        if profile != self.profile:
            self.context.set_optimization_profile_async(profile, stream)
            self.profile = profile

    def _bind(self, name: str, tensor: torch.Tensor, is_input: bool) -> None:
        if is_input:
            self.context.set_input_shape(name, tuple(tensor.shape))
        self.context.set_tensor_address(name, tensor.data_ptr())

    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        rows, seq = input_ids.shape
        past = cache.length if self.use_cache else 0
        total = attention_mask.shape[1]
        stream = torch.cuda.current_stream(self.device).cuda_stream
        self._select_profile(0 if past == 0 or not self.use_cache else 1, stream)
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        for name, buffer in self.static.items():
            value = feeds[name]
            view = buffer[: value.numel()].view(value.shape)
            view.copy_(value)  # device to device; the host never sees the tokens
            self._bind(name, view, True)
        logits = self.logits[: rows * seq * self.vocab].view(rows, seq, self.vocab)
        self._bind("logits", logits, False)
        if self.use_cache:
            for name, tensor in zip(self.past_names, self.kv.past(rows, past)):
                self._bind(name, tensor, True)
            for name, tensor in zip(self.present_names, self.kv.present(rows, total)):
                self._bind(name, tensor, False)
        self._execute(stream, (rows, past, self.kv.current if self.kv else 0), seq == 1 and past > 0)
        if not self.use_cache:
            return logits, None
        self.kv.swap()
        return logits, TrtCache(rows, total)

    def _execute(self, stream: int, key, graphable: bool) -> None:
        if self.graphs is None or not graphable:
            if not self.context.execute_async_v3(stream):
                raise RuntimeError("TensorRT execute_async_v3 failed")
            return
        graph = self.graphs.get(key)
        if graph is None:  # first time this shape and buffer parity is seen: run once, then capture
            self.context.execute_async_v3(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=torch.cuda.current_stream(self.device)):
                self.context.execute_async_v3(torch.cuda.current_stream(self.device).cuda_stream)
            self.graphs[key] = graph
        graph.replay()

    def close(self) -> None:
        self.graphs, self.context, self.engine, self.kv = None, None, None, None


def _torch_dtype(trt, dtype):
    return {trt.float32: torch.float32, trt.float16: torch.float16, trt.int64: torch.int64,
            trt.int32: torch.int32}[dtype]
