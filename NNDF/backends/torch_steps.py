"""`frameworks` backend: the HuggingFace PyTorch model behind the step contract.

The cache is HF's own `DynamicCache` (built from the model config, so sliding-window layers behave as in
`generate`); position ids are passed only to models whose forward accepts them (BLOOM uses ALiBi and takes
none). Runs under `torch.inference_mode` on the device the model lives on.
"""
from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache


class TorchSteps:
    name = "frameworks"

    def __init__(self, model: torch.nn.Module, use_cache: bool):
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.use_cache = use_cache
        params = inspect.signature(model.forward).parameters
        self._takes_positions = "position_ids" in params
        self._can_skip_logits = "logits_to_keep" in params  # LM head on the last position only, as HF generate

    @torch.inference_mode()
    def forward(self, input_ids, attention_mask, position_ids, cache, last_only=False):
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, use_cache=self.use_cache)
        if last_only and self._can_skip_logits:
            kwargs["logits_to_keep"] = 1
        if self._takes_positions:
            kwargs["position_ids"] = position_ids
        if self.use_cache:
            kwargs["past_key_values"] = cache
        out = self.model(**kwargs)
        return out.logits, (out.past_key_values if self.use_cache else None)

    def new_cache(self, batch: int):
        return DynamicCache(config=self.model.config) if self.use_cache else None

    def reorder_cache(self, cache, index):
        cache.reorder_cache(index)
        return cache

    def close(self) -> None:
        self.model = None
