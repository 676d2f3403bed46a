"""`trt --static-cache` step functions for encoder-decoder models: the static decoder engine
(`Seq2Seq.static_export`) over self-attention buffers of the generation's full length.

The encoder and cache-generator engines run as in `Seq2Seq.trt_steps` (the cross-attention keys/values written
into a `KVBuffers` pair once per input). The decoder engine's one pass writes one token per row at
`cache_position`: past.* and present.* are both bound at the full length (`KVBuffers` ping-pong: present is past
with one column written, then the halves swap), so every one-token step has the same shapes and addresses and is
captured as one CUDA graph per (rows, full length, encoder length, buffer parities) with `--use-cuda-graph`; the
token ids, encoder mask and write position are copied into fixed buffers before each replay. The decoder prompt
(one token for text encoder-decoders; an image-to-text prompt) runs one engine pass per token on the first
profile (the encoder's rows), the one-token steps on the second (batch x beams rows). Beam reordering gathers
the full-length buffers on the device.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from NNDF.backends.trt.steps import EngineIO
from Seq2Seq.torch_steps import Seq2SeqCache
from Seq2Seq.trt_steps import Seq2SeqTrtSteps, TrtState


@dataclass(frozen=True)
class StaticState(TrtState):
    """`TrtState` plus the buffers' full length (the generation's decoder positions)."""

    capacity: int = 0


class Seq2SeqTrtStaticSteps(Seq2SeqTrtSteps):
    """Encoder, cache-generator and static decoder engines; `max_length`: the most decoder positions a generation
    holds (the decoder profiles' full-length maximum)."""

    def __init__(self, ios: dict[str, EngineIO], device, max_rows: int, max_input: int, max_length: int):
        super().__init__(ios, device, True, max_rows, max_input, max_output=max_length - 1)  # buffers: max_length
        self.static["cache_position"] = torch.zeros(1, dtype=self.decoder.dtype("cache_position"), device=self.device)

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        if max_length is None:  # internal misuse: the loop and teacher forcing always pass it
            raise TypeError("a static cache needs the most decoder positions it will hold (max_length)")
        cache = super().start(encoder_inputs)
        state: TrtState = cache.kv
        self.kv.past(state.rows, max_length)  # UsageError where the engine's profiles are shorter
        return cache.with_kv(StaticState(state.rows, 0, state.encoder_length, max_length))

    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        """Logits [rows, seq, V] (or [rows, 1, V] when `last_only`): one engine pass per token."""
        state: StaticState = cache.kv
        seq = input_ids.shape[1]
        self._select_profile(0 if state.length == 0 else 1)  # 0: the decoder prompt (the encoder's rows)
        passes = []
        for t in range(seq):
            logits = self._one_token(input_ids[:, t:t + 1], cache.encoder_mask, state, state.length + t)
            passes.append(logits if t == seq - 1 or last_only else logits.clone())  # the buffer is reused
        logits = passes[-1] if last_only or seq == 1 else torch.cat(passes, dim=1)
        return logits, cache.with_kv(StaticState(state.rows, state.length + seq, state.encoder_length,
                                                 state.capacity))

    def _one_token(self, ids, encoder_mask, state: StaticState, write: int) -> torch.Tensor:
        """One engine pass: ids [rows, 1] at decoder position `write`; logits [rows, 1, V] (the shared buffer)."""
        rows, width = state.rows, state.capacity
        self._feed("input_ids", ids)
        self._feed("encoder_attention_mask", encoder_mask)
        self.static["cache_position"].fill_(write)
        self.decoder.bind("cache_position", self.static["cache_position"], True)
        logits = self.logits[: rows * self.vocab].view(rows, 1, self.vocab)
        self.decoder.bind("logits", logits, False)
        for name, tensor in zip(self.past_names, self.kv.past(rows, width)):
            self.decoder.bind(name, tensor, True)
        for name, tensor in zip(self.cross_names, self.cross.past(rows, state.encoder_length)):
            self.decoder.bind(name, tensor, True)
        for name, tensor in zip(self.present_names, self.kv.present(rows, width)):
            self.decoder.bind(name, tensor, False)
        one_token_step = state.length > 0  # the decoder prompt's passes run uncaptured
        key = (rows, width, state.encoder_length, self.kv.current, self.cross.current) if one_token_step else None
        self.decoder.execute(key)
        self.kv.swap()
        return logits

    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        state: StaticState = cache.kv
        self.kv.reorder(index, state.rows, state.capacity)
        if cache.moves_inputs(index, within_inputs):  # beam steps keep each input's (identical) cross keys/values
            self.cross.reorder(index, state.rows, state.encoder_length)
        return cache.select(index, StaticState(len(index), state.length, state.encoder_length, state.capacity),
                            within_inputs)
