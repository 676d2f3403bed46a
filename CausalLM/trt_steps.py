"""The decoder-only kind on TensorRT: `TrtSteps`, the step contract over one decoder engine, with the `trt`
backend's device-resident buffers (`KVBuffers`: ping-pong KV cache, a static cache's full-length buffers) and
engine IO (`EngineIO`; tested on the CPU with ONNX Runtime standing in for the engine, tests/test_trt.py).
"""
from __future__ import annotations

import torch

from NNDF.backends.trt.steps import EngineIO, KVBuffers, TrtCache


class TrtSteps:
    """GenerativeSteps over an engine (profile 0: prompt pass, 1: one-token steps; one profile without a cache).
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

    def reorder_cache(self, cache: TrtCache, index: torch.Tensor, within_inputs: bool = False) -> TrtCache:
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
