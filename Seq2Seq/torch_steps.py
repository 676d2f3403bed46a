"""`frameworks` step functions for encoder-decoder models: the HF PyTorch model behind the step contract.

`start` runs the encoder once; the cache is `Seq2SeqCache`: the encoder's output and padding mask plus HF's
own `EncoderDecoderCache` (self-attention keys/values grow per step; HF fills the cross-attention keys/values
on the first decoder step and reuses them). Reordering (beam search) covers all of it.

With `--static-cache`, `Seq2SeqStaticSteps` runs the family's fused decoder step over fixed buffers instead
(`Seq2Seq.fused_step`), whose one-token step is compiled and replayed from a CUDA graph as the flags say.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from NNDF.backends.torch.capture import capture
from NNDF.backends.torch.greedy import greedy_forward
from NNDF.slots import SlotPool
from Seq2Seq.fused_step import Seq2SeqSlot, reordered


def encoder_mask(encoder_inputs: dict, hidden: torch.Tensor) -> torch.Tensor:
    """The encoder's padding mask [B, S] that `Seq2SeqCache` carries: the input's own `attention_mask`, or all
    ones for an encoder without one (images have no padding)."""
    mask = encoder_inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    return mask


def empty_kv() -> EncoderDecoderCache:
    """HF's cache for an encoder-decoder run before its first decoder step."""
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


@dataclass
class Seq2SeqCache:
    """What the generation loop holds for an encoder-decoder run; `kv` is backend-specific (None without cache)."""

    encoder_hidden: torch.Tensor  # [B, S, D] (None where only the cross-attention cache is needed)
    encoder_mask: torch.Tensor  # [B, S]: padding of the encoder input, applied in every cross-attention
    kv: object = None
    items: torch.Tensor | None = None  # [B]: the encoder row (input) each row decodes; arange at start

    def __post_init__(self):
        if self.items is None:
            self.items = torch.arange(self.encoder_mask.shape[0], device=self.encoder_mask.device)

    def with_kv(self, kv) -> "Seq2SeqCache":
        return replace(self, kv=kv)

    def moves_inputs(self, index: torch.Tensor, within_inputs: bool = False) -> bool:
        """Whether reordering by `index` changes which input some row decodes (prompt expansion), so encoder-side
        tensors (encoder output, mask, cross-attention keys/values) must be gathered. Beam search's per-step
        reordering stays within each input's beams, where those tensors are identical: nothing to copy. A caller
        that knows it (`within_inputs`, the loop's beam steps) spares the check, which waits for the device."""
        if within_inputs:
            return False
        return index.numel() != self.items.numel() or not torch.equal(self.items[index], self.items)

    def select(self, index: torch.Tensor, kv, within_inputs: bool = False) -> "Seq2SeqCache":
        if not self.moves_inputs(index, within_inputs):
            return self.with_kv(kv)
        hidden = None if self.encoder_hidden is None else self.encoder_hidden.index_select(0, index)
        return Seq2SeqCache(hidden, self.encoder_mask.index_select(0, index), kv, self.items[index])


class Seq2SeqTorchSteps:
    name = "frameworks"

    def __init__(self, model: torch.nn.Module, use_cache: bool):
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.use_cache = use_cache

    @torch.inference_mode()
    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        hidden = self.model.get_encoder()(**encoder_inputs).last_hidden_state
        kv = empty_kv() if self.use_cache else None
        return Seq2SeqCache(hidden, encoder_mask(encoder_inputs, hidden), kv)

    @torch.inference_mode()
    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        # decoder positions follow from the cache length (decoder prompts are never padded): no position ids
        out = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=cache.encoder_hidden),
                         attention_mask=cache.encoder_mask, decoder_input_ids=input_ids,
                         past_key_values=cache.kv, use_cache=self.use_cache)
        kv = out.past_key_values if self.use_cache else None
        return out.logits, cache.with_kv(kv)

    def new_cache(self, batch: int, max_length: int):
        raise TypeError("an encoder-decoder cache comes from start(encoder_inputs)")  # internal misuse

    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        if cache.kv is not None:  # HF's cache, in place; cross-attention keys/values only when inputs move
            kv = cache.kv if cache.moves_inputs(index, within_inputs) else cache.kv.self_attention_cache
            kv.reorder_cache(index)
        return cache.select(index, cache.kv, within_inputs)

    def close(self) -> None:
        self.model = None


def static_start(slot_for, hidden: torch.Tensor, encoder_inputs: dict, max_length: int | None):
    """The start of a static-cache generation on any backend: the pooled slot for this encoder output's rows and
    length and the generation's `max_length` (`slot_for(rows, max_length, encoder_length)`), reset, with the
    input's encoder mask copied in; returns (slot, mask). The caller fills the cross-attention buffers."""
    if max_length is None:  # internal misuse: the loop and teacher forcing always pass it
        raise TypeError("a static cache needs the most decoder positions it will hold (max_length)")
    mask = encoder_mask(encoder_inputs, hidden)
    slot = slot_for(hidden.shape[0], max_length, hidden.shape[1]).reset()
    slot.encoder_mask.copy_(mask)
    return slot, mask


class Seq2SeqStaticSteps(Seq2SeqTorchSteps):
    """`--static-cache` on frameworks: the family's fused decoder step (`Seq2Seq.fused_step.FusedSeq2SeqStep`) over
    pooled `Seq2SeqSlot`s, one per (rows, max_length, encoder_length). `start` runs HF's encoder, takes the pool's
    slot for that shape, copies the encoder mask in and fills the cross-attention buffers; the decoder prompt runs
    eagerly (`prefill`); every later step copies its token into the slot and runs the one-token step, or replays
    it from a CUDA graph (`cuda_graph`), captured on the slot's first step. Beam reordering moves rows in place
    (the cross-attention buffers only when rows change inputs)."""

    def __init__(self, model: torch.nn.Module, fused, cuda_graph: bool = False):
        super().__init__(model, use_cache=True)
        self.fused, self.cuda_graph = fused, cuda_graph
        self._slots: SlotPool[Seq2SeqSlot] = SlotPool()

    @torch.inference_mode()
    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        hidden = self.model.get_encoder()(**encoder_inputs).last_hidden_state  # [B, S, D]
        slot, mask = static_start(self._slot, hidden, encoder_inputs, max_length)
        self.fused.cross(hidden, slot)
        return Seq2SeqCache(None, mask, slot)

    def _slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        return self._slots.get((rows, max_length, encoder_length),
                               lambda _: self.fused.new_slot(rows, max_length, encoder_length))

    @torch.inference_mode()
    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        slot, length = cache.kv, attention_mask.shape[1]
        if input_ids.shape[1] > 1 or length == 1:  # the decoder prompt (from column 0): eager
            if length != input_ids.shape[1]:
                raise TypeError("a multi-token decoder pass must start at column 0")  # internal misuse
            return self.fused.prefill(input_ids, slot, last_only), cache
        slot.set_length(length)
        slot.ids.copy_(input_ids)
        if not self.cuda_graph:
            return self.fused.one_token(slot), cache
        if slot.graph is None:
            slot.graph, slot.logits = capture(slot, self.fused.one_token, self.device,
                                              f"{type(self.fused).__name__}'s step")
        slot.graph.replay()
        return slot.logits, cache  # valid until the next step (the loop reads it before stepping again)

    def greedy_in_step(self, cache: Seq2SeqCache) -> bool:
        """Whether `greedy_forward` serves a generation on this cache: always (a static slot's)."""
        return True

    @torch.inference_mode()
    def greedy_forward(self, cache: Seq2SeqCache, input_ids, position_ids, length: int, eos_ids: tuple[int, ...],
                       forbid: bool, vocab: int):
        """The next greedy token [rows], chosen and fed back inside the slot's step
        (`NNDF.backends.torch.greedy.greedy_forward`: its arguments), and the cache."""
        tokens = greedy_forward(cache.kv, self.fused.one_token, input_ids, position_ids, length, eos_ids, forbid,
                                vocab, self.cuda_graph, self.device, f"{type(self.fused).__name__}'s greedy step")
        return tokens, cache

    @torch.inference_mode()
    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        return reordered(cache, index, lambda *shape: self._slot(*shape).reset(), within_inputs)

    def close(self) -> None:
        super().close()
        self.fused = None
        self._slots.close()
