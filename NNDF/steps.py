"""The steps contracts: what a backend's `setup` returns for a run, one family of protocols.

- `Steps`: what every backend's steps have (a device, a name for reports, `close`).
- `GenerativeSteps`: the step functions the shared generation loop runs on (decoder-only models);
  `EncoderDecoderSteps` adds the encoder's one pass (`start`); `GreedySteps` adds a step that picks its own greedy
  token; `ServedGeneration` hands the whole loop to a server.
- `ForwardSteps`: one forward pass over named inputs (encoder models: embeddings, class logits).
Tensors crossing the contracts are torch tensors on `steps.device`, so the loop, beam bookkeeping and sampling
are written once. The cache is opaque to the loop: it only asks the backend for an empty one and to reorder it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

import torch

Cache = Any  # backend-specific: HF DynamicCache, a tuple of tensors, device buffers, ...


class Steps(Protocol):
    """What every backend's steps have."""

    device: torch.device
    name: str  # backend name for reports

    def close(self) -> None:
        """Free the backend's resources."""
        ...


class GenerativeSteps(Steps, Protocol):
    """Steps of a model that generates tokens: new tokens in, logits and the grown cache out."""

    use_cache: bool

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, cache: Cache,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, Cache]:
        """Run new tokens through the model.

        input_ids [B, S] (the new tokens with a cache; the whole sequence without one), attention_mask
        [B, P + S] (P = cached length), position_ids [B, S]. Returns logits [B, S, V] ([B, 1, V] allowed when
        `last_only`: a hint that only the last position is needed, which a backend may use to skip work) and
        the cache that now also holds these S tokens (None when `use_cache` is off). The logits are valid until
        the next call (a CUDA-graph step returns its fixed output buffer).
        """
        ...

    def new_cache(self, batch: int, max_length: int) -> Cache:
        """An empty cache for `batch` rows that will hold at most `max_length` positions (prompt + new tokens;
        a static cache allocates them all at once). None when `use_cache` is off."""
        ...

    def reorder_cache(self, cache: Cache, index: torch.Tensor, within_inputs: bool = False) -> Cache:
        """Rows of the cache picked by `index` [B'] (beam search reordering and prompt expansion).
        `within_inputs`: the caller knows every row stays on its own input (a beam step after the prompt's
        expansion), so an encoder-decoder's encoder-side state stays as it is, unchecked (a check would wait for
        the device); decoder-only steps ignore it."""
        ...




class GreedySteps(GenerativeSteps, Protocol):
    """Steps that can choose a greedy generation's next token inside their one-token step and feed it to
    themselves (frameworks' static slots: NNDF/backends/torch/greedy.py; onnxrt's fused-graph slots on the CPU:
    CausalLM/ort_fused.py); the loop uses them where
    `greedy_in_step(cache)` is true (NNDF.generation.GREEDY_IN_STEP)."""

    def greedy_in_step(self, cache: Cache) -> bool:
        """Whether `greedy_forward` serves a generation on this cache."""
        ...

    def greedy_forward(self, cache: Cache, input_ids: torch.Tensor | None, position_ids: torch.Tensor | None,
                       length: int, eos_ids: tuple[int, ...], forbid: bool,
                       vocab: int) -> tuple[torch.Tensor, Cache]:
        """The next greedy token [B] (valid until the next call) and the cache: the step runs on the token it chose
        last (or `input_ids` [B, 1], where the loop changed it), with EOS masked where `forbid`. `position_ids`
        [B, 1] and `length` (the columns it sees) come with the generation's first step; later steps advance
        their own."""
        ...


class EncoderDecoderSteps(GenerativeSteps, Protocol):
    """Steps of an encoder-decoder model (Seq2Seq/, Vision2Seq/): `start` runs the encoder once per input and
    returns the decoder's initial cache, which carries the encoder's output (and its padding mask, which every
    decoder step's cross-attention needs) plus, with a KV cache, the cross-attention keys and values. `forward`
    and `reorder_cache` then work as for a decoder (reordering also covers the encoder's part)."""

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Cache:
        """Run the encoder on named inputs [B, ...] (e.g. input_ids and attention_mask). `max_length`: the most
        decoder positions (prompt + new tokens) the cache will hold, which a static cache allocates at once
        (None: a growing cache, or steps that need no bound)."""
        ...


class ServedGeneration(ABC):
    """Steps of a model whose generation loop runs elsewhere (a served model: NNDF/backends/triton/backend.py): the shared
    `generate` hands the whole generation to `generate`, with the same arguments and the same result."""

    device: torch.device
    use_cache: bool
    name: str

    @abstractmethod
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, config, observer=None,
                 encoder: dict | None = None):
        """NNDF.generation.generate's result (a GenerationOutput) for these inputs and settings."""

    @abstractmethod
    def forward(self, input_ids, attention_mask, position_ids, cache, last_only: bool = False):
        """Teacher forcing only (one unpadded row from an empty cache, or from `start`'s): the logits, computed
        where the model is served; anything else is refused in one line (UsageError)."""

    def new_cache(self, batch: int, max_length: int):
        return None

    def reorder_cache(self, cache, index, within_inputs: bool = False):
        return cache

    @abstractmethod
    def close(self) -> None: ...


class ForwardSteps(Steps, Protocol):
    """Steps of an encoder model, one forward pass per batch. Inputs are the tokenizer's (`input_ids`,
    `attention_mask`, and `token_type_ids` where the model takes them), int64 [B, T] on `steps.device`; the output
    is the head's tensor: sentence embeddings [B, H] (pooled, and normalized where the model says so) or logits
    [B, C] (sequence classification) / [B, T, C] (token classification), float32 or the run's fp16, on
    `steps.device`, valid until the next call."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One forward pass over a (right-padded) batch; the head's output."""
        ...


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding: [0 0 1 2] for mask [0 1 1 1] (pad positions are masked anyway)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 0)
