"""The decoder-only kind on PyTorch: the HuggingFace model behind the step contract (the `frameworks` backend).

The cache is HF's own `DynamicCache` (built from the model config, so sliding-window layers behave as in
`generate`), or with `static_cache` HF's `StaticCache`: buffers of the generation's full length written in place,
so every one-token step has the same shapes. Position ids are passed only to models whose forward accepts them
(BLOOM uses ALiBi and takes none). Runs under `torch.inference_mode` on the device the model lives on.

With a static cache the one-token step can be replayed from a CUDA graph (`cuda_graph`) and compiled by
`torch.compile` (`compile_mode`, inductor without its own CUDA graphs: capture stays ours, so the graph, its
static inputs and its cache are one object, `HFStaticSlot`, a `NNDF.slots.KVSlot`). Slots are pooled per
(rows, length) in a `SlotPool`: the benchmark's repeated generations reuse one captured graph.

A family's fused decode step (`--fused-decode`, `FusedStep`) replaces the model's code for the static cache: it
makes its own slots (`KVSlot`s over its own buffers), runs the prompt pass and the one-token step; the capture,
the slot pool and beam reordering stay here.
"""
from __future__ import annotations

import inspect
from typing import Protocol

import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import StaticLayer

from NNDF.backends.torch.capture import capture
from NNDF.backends.torch.compile import compile_step
from NNDF.backends.torch.greedy import greedy_forward
from NNDF.errors import UsageError
from NNDF.slots import KVSlot, SlotPool, reordered, step_inputs


class HFStaticSlot(KVSlot):
    """A `KVSlot` whose cache is HF's `StaticCache` for `rows` x `max_length` tokens (so `past` stays empty):
    HF's layers keep their write position on the device (`cumulative_length`), so a replayed step advances it
    without the host, and their buffers are made on the first write."""

    def __init__(self, config, rows: int, max_length: int, device: torch.device):
        super().__init__(rows, max_length, [], step_inputs(rows, max_length, device))
        self.cache = full_length_static_cache(config, max_length)

    def reset(self) -> HFStaticSlot:
        self.mask.fill_(1)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.cumulative_length.zero_()
        return self

    def set_length(self, length: int) -> None:
        """The step about to run sees `length` columns (HF's layers track their write position themselves)."""

    def positions_state(self) -> list[torch.Tensor]:
        return [layer.cumulative_length.clone() for layer in self.cache.layers]

    def restore_positions(self, state: list[torch.Tensor]) -> None:
        for layer, saved in zip(self.cache.layers, state):
            layer.cumulative_length.copy_(saved)

    def take_rows(self, source: HFStaticSlot, index: torch.Tensor) -> None:
        """This slot's rows become `source`'s rows `index` (in place: captured graphs keep their addresses)."""
        self.mask.copy_(source.mask.index_select(0, index))
        for mine, theirs in zip(self.cache.layers, source.cache.layers):
            keys, values = theirs.keys.index_select(0, index), theirs.values.index_select(0, index)
            if not mine.is_initialized:
                mine.lazy_initialization(keys, values)
            mine.keys.copy_(keys)
            mine.values.copy_(values)
            mine.cumulative_length.copy_(theirs.cumulative_length)

    def close(self) -> None:
        super().close()
        self.cache = None


def full_length_static_cache(config, max_length: int) -> StaticCache:
    """HF's `StaticCache` with every layer `max_length` long. HF's sliding-window layers (Mistral, Phi-3) roll a
    window-long buffer and count their length in a Python int: host state that a replayed step cannot advance
    and a reused slot would carry over. Over full-length buffers the model's own sliding-window mask (built from
    absolute positions) keeps the window exact, and every layer writes at its device-held position."""
    cache = StaticCache(config=config, max_cache_len=max_length)
    cache.layers = [StaticLayer(max_cache_len=max_length) if getattr(layer, "is_sliding", False) else layer
                    for layer in cache.layers]
    return cache


def check_static_cache_support(model: torch.nn.Module) -> None:
    """HF marks the models whose forward works on a static cache (fixed shapes, no data-dependent host code)
    with `_can_compile_fullgraph`; GPT-Neo, for one, slices its causal mask by the cache's length and would give
    wrong tokens. Refuse the others in one line."""
    if not getattr(model, "_can_compile_fullgraph", False):
        raise UsageError(f"--static-cache: transformers' {type(model).__name__} does not support a static KV cache "
                         "(it marks _can_compile_fullgraph False); drop --static-cache for this model")


# --compile-mode -> inductor options. max-autotune is gpt-fast's decoding recipe without inductor's CUDA graphs
# (we capture ourselves): GEMM templates autotuned against cuBLAS per shape (epilogues such as bias + GELU
# fused into them) and coordinate-descent tuning of the generated kernels' launch configs.
class FusedStep(Protocol):
    """A family's fused decode step over its own static cache (see the module docstring)."""

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """An empty `KVSlot` over the step's own buffers (with a mask and a device write position)."""

    def prefill(self, input_ids, mask, position_ids, slot, last_only: bool) -> torch.Tensor:
        """The prompt's logits; writes its K/V into `slot` (mask: the slot's mask over the columns so far)."""

    def one_token(self, slot) -> torch.Tensor:
        """Logits [R, 1, V] of `slot.ids` (fixed shapes and addresses: what a CUDA graph captures)."""


class TorchSteps:
    name = "frameworks"

    def __init__(self, model: torch.nn.Module, use_cache: bool, static_cache: bool = False,
                 cuda_graph: bool = False, compile_mode: str | None = None, fused: FusedStep | None = None):
        self.model = model.eval()
        self.fused = fused  # compiled by itself (its functions), so _step_model stays the eager model
        self.device = next(model.parameters()).device
        self.use_cache, self.static_cache, self.cuda_graph = use_cache, static_cache, cuda_graph
        params = inspect.signature(model.forward).parameters
        self._takes_positions = "position_ids" in params
        self._can_skip_logits = "logits_to_keep" in params  # LM head on the last position only, as HF generate
        # the one-token step of a static cache: compiled shapes never change, so inductor compiles it once per rows
        self._step_model = compile_step(model, compile_mode) if compile_mode and not fused else model
        self._slots: SlotPool[KVSlot] = SlotPool()
        if static_cache:
            check_static_cache_support(model)

    def _kwargs(self, input_ids, attention_mask, position_ids, cache, last_only) -> dict:
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, use_cache=self.use_cache)
        if last_only and self._can_skip_logits:
            kwargs["logits_to_keep"] = 1
        if self._takes_positions:
            kwargs["position_ids"] = position_ids
        if self.use_cache:
            kwargs["past_key_values"] = cache
        return kwargs

    @torch.inference_mode()
    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        if isinstance(cache, KVSlot):
            return self._static_forward(input_ids, attention_mask, position_ids, cache, last_only)
        out = self.model(**self._kwargs(input_ids, attention_mask, position_ids, cache, last_only))
        return out.logits, (out.past_key_values if self.use_cache else None)

    def _static_forward(self, input_ids, attention_mask, position_ids, slot: KVSlot, last_only):
        slot.mask[:, : attention_mask.shape[1]].copy_(attention_mask)
        if input_ids.shape[1] > 1 or attention_mask.shape[1] == input_ids.shape[1]:  # the prompt: eager
            if self.fused is not None:
                mask = slot.mask[:, : attention_mask.shape[1]]
                return self.fused.prefill(input_ids, mask, position_ids, slot, last_only), slot
            out = self.model(**self._kwargs(input_ids, slot.mask, position_ids, slot.cache, last_only))
            return out.logits, slot
        slot.set_length(attention_mask.shape[1])
        slot.ids.copy_(input_ids)
        slot.positions.copy_(position_ids)
        if not self.cuda_graph:
            return self._one_token(slot), slot
        if slot.graph is None:
            slot.graph, slot.logits = capture(slot, self._one_token, self.device,
                                              f"{type(self.model).__name__}'s step")
        slot.graph.replay()
        return slot.logits, slot  # valid until the next step (the loop reads it before stepping again)

    def greedy_in_step(self, cache) -> bool:
        """Whether `greedy_forward` serves a generation on this cache: a static slot's."""
        return isinstance(cache, KVSlot)

    @torch.inference_mode()
    def greedy_forward(self, cache: KVSlot, input_ids, position_ids, length: int, eos_ids: tuple[int, ...],
                       forbid: bool, vocab: int):
        """The next greedy token [rows], chosen and fed back inside the slot's step
        (`NNDF.backends.torch.greedy.greedy_forward`: its arguments), and the cache."""
        tokens = greedy_forward(cache, self._one_token, input_ids, position_ids, length, eos_ids, forbid, vocab,
                                self.cuda_graph, self.device, f"{type(self.model).__name__}'s greedy step")
        return tokens, cache

    def _one_token(self, slot: KVSlot) -> torch.Tensor:
        if self.fused is not None:
            return self.fused.one_token(slot)
        kwargs = self._kwargs(slot.ids, slot.mask, slot.positions, slot.cache, last_only=True)
        return self._step_model(**kwargs).logits

    @torch.inference_mode()  # the slots' tensors are inference tensors (made and updated inside forward)
    def new_cache(self, batch: int, max_length: int):
        if not self.use_cache:
            return None
        if not self.static_cache:
            return DynamicCache(config=self.model.config)
        return self._slot(batch, max_length).reset()

    def _slot(self, rows: int, max_length: int) -> KVSlot:
        return self._slots.get((rows, max_length), lambda _: self._new_slot(rows, max_length))

    def _new_slot(self, rows: int, max_length: int) -> KVSlot:
        if self.fused is not None:
            return self.fused.new_slot(rows, max_length)
        return HFStaticSlot(self.model.config, rows, max_length, self.device)

    @torch.inference_mode()
    def reorder_cache(self, cache, index, within_inputs: bool = False):
        if isinstance(cache, KVSlot):
            return reordered(cache, index, lambda rows, length: self._slot(rows, length).reset())
        cache.reorder_cache(index)
        return cache

    def close(self) -> None:
        self.model = self._step_model = self.fused = None
        self._slots.close()
