"""`trt` step functions for encoder-decoder models: encoder, cache-generator and decoder engines, device buffers.

Like `NNDF/backends/trt/steps.py`, every buffer is a torch tensor allocated once at the profile maxima and bound
by pointer, and the engines are reached only through `EngineIO` (so this bookkeeping is tested on the CPU with
ONNX Runtime standing in for TensorRT):
- `start`: the encoder writes the hidden states into one buffer; with a KV cache the cache generator reads them
  and writes every layer's cross-attention keys/values straight into the current half of a `KVBuffers` pair.
- `forward`: the decoder reads its own past (ping-pong `KVBuffers`, as decoder-only) and the cross keys/values,
  and writes present.* into the idle half. Beam reordering gathers both on the device.
- One-token steps are captured as CUDA graphs (with `--use-cuda-graph`) per (rows, past, encoder length,
  buffer parities); token ids and the encoder mask are copied into static buffers before each replay.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from NNDF.backends.trt.steps import EngineIO, KVBuffers
from Seq2Seq.torch_steps import Seq2SeqCache, encoder_mask


@dataclass(frozen=True)
class TrtState:
    """Where a TensorRT encoder-decoder run stands (the tensors stay in the buffers)."""

    rows: int
    length: int  # decoder positions in the self-attention cache
    encoder_length: int


def _view(buffer: torch.Tensor, shape) -> torch.Tensor:
    count = 1
    for size in shape:
        count *= size
    return buffer[:count].view(*shape)


class Seq2SeqTrtSteps:
    name = "trt"

    def __init__(self, ios: dict[str, EngineIO], device, use_cache: bool, max_rows: int, max_input: int,
                 max_output: int):
        self.encoder, self.decoder = ios["encoder"], ios["decoder"]
        self.cache_generator = ios.get("cache_generator")
        self.device, self.use_cache = torch.device(device), use_cache
        self.hidden_size = hidden_size = self.encoder.shape("encoder_hidden_states")[-1]
        fixed_length = self.encoder.shape("encoder_hidden_states")[1]  # image encoders: a fixed patch count
        max_input = fixed_length if fixed_length > 0 else max_input
        self.vocab = self.decoder.shape("logits")[-1]
        empty = lambda n, dtype: torch.empty(n, dtype=dtype, device=self.device)  # noqa: E731
        self.hidden = empty(max_rows * max_input * hidden_size, self.encoder.dtype("encoder_hidden_states"))
        self.logits = empty(max_rows * max_output * self.vocab, self.decoder.dtype("logits"))
        # static decoder inputs (fixed addresses for CUDA graphs); encoder inputs are bound as given
        self.static = {n: empty(max_rows * max(max_input, max_output + 1), self.decoder.dtype(n))
                       for n in ("input_ids", "encoder_attention_mask")}
        self.kv = self.cross = None
        if use_cache:
            self.past_names = [n for n in self.decoder.inputs if n.startswith("past.")]
            self.cross_names = [n for n in self.decoder.inputs if n.startswith("cross.")]
            self.present_names = [n for n in self.decoder.outputs if n.startswith("present.")]
            dims = lambda names: [tuple(self.decoder.shape(n))[1::2] for n in names]  # noqa: E731 (heads, head_dim)
            dtype = self.decoder.dtype(self.past_names[0])
            self.kv = KVBuffers(dims(self.past_names), max_rows, max_output + 1, dtype, self.device)
            self.cross = KVBuffers(dims(self.cross_names), max_rows, max_input, dtype, self.device)
        self.profile = -1

    def _feed(self, name: str, value: torch.Tensor) -> None:
        view = _view(self.static[name], value.shape)
        view.copy_(value)  # device to device: fixed addresses for CUDA graphs
        self.decoder.bind(name, view, True)

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        inputs = {name: tensor.contiguous() for name, tensor in encoder_inputs.items()}
        for name, tensor in inputs.items():
            self.encoder.bind(name, tensor, True)
        rows = next(iter(inputs.values())).shape[0]
        length = self._encoder_length(inputs)
        hidden = _view(self.hidden, (rows, length, self.hidden_size))
        self.encoder.bind("encoder_hidden_states", hidden, False)
        self.encoder.execute()
        mask = encoder_mask(inputs, hidden)
        if not self.use_cache:
            return Seq2SeqCache(hidden, mask, TrtState(rows, 0, length))
        self.cache_generator.bind("encoder_hidden_states", hidden, True)
        for name, tensor in zip(self.cross_names, self.cross.past(rows, length)):
            self.cache_generator.bind(name, tensor, False)
        self.cache_generator.execute()
        return Seq2SeqCache(None, mask, TrtState(rows, 0, length))

    def _encoder_length(self, inputs: dict) -> int:
        """Encoder output positions: the text length, or the engine's fixed count (image patches)."""
        fixed = self.encoder.shape("encoder_hidden_states")[1]
        return fixed if fixed > 0 else inputs["attention_mask"].shape[1]

    def _select_profile(self, profile: int) -> None:
        if profile != self.profile:
            self.decoder.select_profile(profile)
            self.profile = profile

    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        rows, seq = input_ids.shape
        state: TrtState = cache.kv
        past = state.length if self.use_cache else 0
        self._select_profile(1 if self.use_cache and past > 0 else 0)
        self._feed("input_ids", input_ids)
        self._feed("encoder_attention_mask", cache.encoder_mask)
        logits = _view(self.logits, (rows, seq, self.vocab))
        self.decoder.bind("logits", logits, False)
        if not self.use_cache:
            self.decoder.bind("encoder_hidden_states", cache.encoder_hidden.contiguous(), True)
            self.decoder.execute()
            return logits, cache
        for name, tensor in zip(self.past_names, self.kv.past(rows, past)):
            self.decoder.bind(name, tensor, True)
        for name, tensor in zip(self.cross_names, self.cross.past(rows, state.encoder_length)):
            self.decoder.bind(name, tensor, True)
        for name, tensor in zip(self.present_names, self.kv.present(rows, past + seq)):
            self.decoder.bind(name, tensor, False)
        one_token_step = seq == 1 and past > 0
        key = (rows, past, state.encoder_length, self.kv.current, self.cross.current)
        self.decoder.execute(key if one_token_step else None)
        self.kv.swap()
        return logits, cache.with_kv(TrtState(rows, past + seq, state.encoder_length))

    def new_cache(self, batch: int, max_length: int):
        raise TypeError("an encoder-decoder cache comes from start(encoder_inputs)")  # internal misuse

    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        state: TrtState = cache.kv
        if self.use_cache:
            self.kv.reorder(index, state.rows, state.length)
            if cache.moves_inputs(index, within_inputs):  # beam steps keep each input's (identical) cross keys/values
                self.cross.reorder(index, state.rows, state.encoder_length)
        return cache.select(index, TrtState(len(index), state.length, state.encoder_length), within_inputs)

    def close(self) -> None:
        self.encoder = self.decoder = self.cache_generator = None
        self.kv = self.cross = self.hidden = self.logits = self.static = None
