"""Static slots: fixed-address buffers for one shape, pooled so that later calls of that shape reuse them.

A step whose shapes never change can be captured once as a CUDA graph (by torch, or by ONNX Runtime's or
TensorRT's own graph mode) and replayed; a replay reads and writes the addresses it was captured with. A `Slot`
holds those buffers for one shape: the step's named inputs, its output, and what replays it (a graph id for a
runtime's own graph mode, a torch-captured `graph`, a backend's `binding` of the buffers made once). A `KVSlot`
adds a decoder's static KV cache for rows x max_length tokens, written in place, plus what the generation loop
needs of it (reset, beam reordering in place, the device-side write position). Buffers made by `stacked_zeros`
lie back to back in one allocation, so a beam reordering moves every layer's rows in one gather and one copy
instead of two kernels per buffer (the loop's host cost per beam step). `SlotPool` keeps one slot per
shape key for the life of a steps object: a key's slot is made by the caller's factory on first use and reused
afterwards (no eviction: a run sees few shapes, e.g. the benchmark's repeated generations share one);
`close()` releases every slot.

What a backend allocates (HF's `StaticCache`, an exported graph's past tensors, a family's fused step's own K/V)
is the factory it passes to `SlotPool.get`; how it captures or replays stays in its steps.
"""
from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

import torch


class Slot:
    """Fixed-address buffers of one shape: `inputs` (the step's named inputs, copied into before each run),
    `output` (written by each run, valid until the next), and what replays the step over them: `graph_id` (the
    pool's number for this slot, >= 1: a runtime's own CUDA-graph id), `graph` (a CUDA graph torch captured) and
    `binding` (a backend's binding of these buffers, made once since the addresses never change)."""

    def __init__(self, inputs: dict[str, torch.Tensor], output: torch.Tensor | None = None, graph_id: int = -1):
        self.inputs, self.output, self.graph_id = inputs, output, graph_id
        self.graph: torch.cuda.CUDAGraph | None = None
        self.binding: object = None

    def close(self) -> None:
        """Drop the buffers, the captured graph and the binding (their memory goes back once unreferenced)."""
        self.inputs, self.output, self.graph, self.binding = {}, None, None, None


class KVSlot(Slot):
    """A static KV cache for `rows` x `max_length` tokens and the fixed-address inputs of its one-token step.

    `past`: the cache tensors, rows first (e.g. [rows, heads, max_length, head_dim] each), written in place.
    `inputs` by name: "input_ids" and "position_ids" [rows, 1]; optionally "attention_mask" [rows, max_length]
    (full width: columns not yet written are 1, the causal mask hides them) and "cache_position" (the write
    position on the device, in the shape its step reads); plus whatever else the step binds at fixed addresses.
    `logits` is the output: the one-token step's [rows, 1, vocab], overwritten by each replay."""

    def __init__(self, rows: int, max_length: int, past: list[torch.Tensor], inputs: dict[str, torch.Tensor],
                 logits: torch.Tensor | None = None, graph_id: int = -1):
        super().__init__(inputs, logits, graph_id)
        self.rows, self.max_length, self.past = rows, max_length, past
        self._past_stack = stacked_view(past)  # [layers x 2, rows, ...] over `past`, or None
        # a greedy step that picks and feeds its own token (NNDF.backends.torch.greedy): what it reads, its
        # captured graph and its output [rows]; a CPU step's numpy views of its inputs and logits (CausalLM.ort_fused)
        self.choice, self.greedy_graph, self.tokens, self.views = None, None, None, None
        self.prompt_binding: object = None  # a backend's binding for prompt passes, made once (CausalLM.ort_fused)

    ids = property(lambda self: self.inputs["input_ids"])
    positions = property(lambda self: self.inputs["position_ids"])
    mask = property(lambda self: self.inputs.get("attention_mask"))
    write = property(lambda self: self.inputs.get("cache_position"))

    @property
    def logits(self) -> torch.Tensor | None:
        return self.output

    @logits.setter
    def logits(self, value: torch.Tensor | None) -> None:
        self.output = value

    def reset(self) -> KVSlot:
        """An empty cache again: every mask column 1, the write position 0 (the buffers keep their addresses)."""
        if self.mask is not None:
            self.mask.fill_(1)
        if self.write is not None:
            self.write.zero_()
        return self

    def set_length(self, length: int) -> None:
        """The step about to run sees `length` columns: it writes its K/V at column length - 1."""
        self.write.fill_(length - 1)

    def positions_state(self) -> list[torch.Tensor]:
        return [self.write.clone()]

    def restore_positions(self, state: list[torch.Tensor]) -> None:
        self.write.copy_(state[0])

    def take_rows(self, source: KVSlot, index: torch.Tensor) -> None:
        """This slot's rows become `source`'s rows `index` [rows] (in place: captured graphs keep their addresses)."""
        if self.mask is not None:
            self.mask.copy_(source.mask.index_select(0, index))
        take_rows(self.past, self._past_stack, source.past, source._past_stack, index)
        if self.write is not None and source is not self:
            self.write.copy_(source.write)

    def close(self) -> None:
        super().close()
        self.past, self._past_stack = [], None
        self.choice, self.greedy_graph, self.tokens, self.views = None, None, None, None
        self.prompt_binding = None


def stacked_zeros(count: int, shape: tuple[int, ...], dtype, device) -> list[torch.Tensor]:
    """`count` zeroed buffers of `shape`, rows first, as views of one allocation [count, *shape] (`take_rows`
    then moves rows of all of them at once)."""
    return list(torch.zeros(count, *shape, dtype=dtype, device=device).unbind(0))


def stacked_view(buffers: list[torch.Tensor]) -> torch.Tensor | None:
    """One view [len(buffers), *shape] over `buffers` when they lie back to back in one storage with one shape and
    dtype (as `stacked_zeros` makes them), else None."""
    if not buffers:
        return None
    first = buffers[0]
    try:
        size, storage = first.numel() * first.element_size(), first.untyped_storage().data_ptr()
        for i, buffer in enumerate(buffers):
            if (buffer.shape != first.shape or buffer.dtype != first.dtype or not buffer.is_contiguous()
                    or buffer.untyped_storage().data_ptr() != storage
                    or buffer.data_ptr() != first.data_ptr() + i * size):
                return None
    except RuntimeError:  # tensors without memory (an exporter's fake tensors): no stacked view
        return None
    return first.as_strided((len(buffers), *first.shape), (first.numel(), *first.stride()))


STACKED_DEVICES = ("cuda",)  # device types whose `take_rows` moves stacked buffers at once


def take_rows(mine: list[torch.Tensor], my_stack: torch.Tensor | None, theirs: list[torch.Tensor],
              their_stack: torch.Tensor | None, index: torch.Tensor) -> None:
    """mine[i] = theirs[i][index] for every buffer, in place (rows first; `index` [rows]). On CUDA, two kernels
    when both lists have a stacked view (`stacked_view`); else two per buffer (on the CPU, where a launch costs
    nothing, one buffer-sized temporary at a time stays in cache instead of one as large as all of them)."""
    if my_stack is not None and their_stack is not None and index.device.type in STACKED_DEVICES:
        my_stack.copy_(their_stack.index_select(1, index))
        return
    for buffer, source in zip(mine, theirs):
        buffer.copy_(source.index_select(0, index))


def write_kv_columns(qkv: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, write: torch.Tensor,
                     q_features: int) -> None:
    """The key and value columns of a q/k/v product qkv [R, ...] (after `q_features`: the keys, then as many
    values, head after head) written into a static cache's buffers [R, kv heads, length, head size] at the write
    position `write` [1]."""
    rows, kv_heads, _, dim = keys.shape
    width = kv_heads * dim
    keys[:, :, write] = qkv[:, q_features:q_features + width].reshape(rows, kv_heads, 1, dim)
    values[:, :, write] = qkv[:, q_features + width:q_features + 2 * width].reshape(rows, kv_heads, 1, dim)


def step_inputs(rows: int, max_length: int, device, mask: bool = True) -> dict[str, torch.Tensor]:
    """A one-token step's fixed-address inputs: ids and positions [rows, 1] (zeros), the full-width mask
    [rows, max_length] (ones) unless `mask` is False."""
    inputs = {"input_ids": torch.zeros(rows, 1, dtype=torch.long, device=device),
              "position_ids": torch.zeros(rows, 1, dtype=torch.long, device=device)}
    if mask:
        inputs["attention_mask"] = torch.ones(rows, max_length, dtype=torch.long, device=device)
    return inputs


def reordered(slot: KVSlot, index: torch.Tensor, fresh: Callable[[int, int], KVSlot]) -> KVSlot:
    """The slot holding rows `index` [N] of `slot` (beam reordering): `slot` itself, filled in place, when the row
    count stays; else `fresh(N, max_length)`, the pool's (reset) slot for N rows."""
    target = slot if index.numel() == slot.rows else fresh(index.numel(), slot.max_length)
    target.take_rows(slot, index)
    return target


S = TypeVar("S", bound=Slot)


class SlotPool(Generic[S]):
    """One slot per shape key (e.g. (rows, max_length)), made on first use by the caller's factory and reused
    afterwards. Slots are numbered 1, 2, ... in the order they are made (the number a runtime's CUDA-graph mode
    takes as a graph id; -1 means no graph there). No limit and no eviction: a slot lives until `close()`."""

    def __init__(self):
        self._slots: dict[Hashable, S] = {}

    def get(self, key: Hashable, make: Callable[[int], S]) -> S:
        """The slot for `key`, made by `make(number)` the first time."""
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = make(len(self._slots) + 1)
        return slot

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slots

    def close(self) -> None:
        """Release every slot (buffers, graphs, bindings); the pool is empty and usable again."""
        for slot in self._slots.values():
            slot.close()
        self._slots.clear()
