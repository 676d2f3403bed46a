"""`onnxrt` step functions for encoder-decoder models: the three exported graphs on ONNX Runtime.

`start` runs the encoder and, with a KV cache, the cache generator once per input; the cache is a
`Seq2SeqCache` whose `kv` is (self-attention past tuple, cross-attention tuple). Without a cache the decoder
graph re-reads the encoder output every step. Every graph runs through `OrtGraph` (zero-copy on the CPU, IO
binding on CUDA).
"""
from __future__ import annotations

from pathlib import Path

import torch

from NNDF.backends.onnxrt.steps import OrtGraph, empty_past
from NNDF.errors import ArtifactError
from Seq2Seq.torch_steps import Seq2SeqCache, encoder_mask


class Seq2SeqOrtSteps:
    name = "onnxrt"

    def __init__(self, paths: dict[str, Path], device: torch.device, use_cache: bool, threads: int = 0,
                 encoder_names: tuple[str, ...] = ("input_ids", "attention_mask")):
        self.device, self.use_cache, self.encoder_names = device, use_cache, encoder_names
        self.encoder = OrtGraph(paths["encoder"], device, threads)
        self.decoder = OrtGraph(paths["decoder"], device, threads)
        self.cache_generator = OrtGraph(paths["cache_generator"], device, threads) if use_cache else None
        self._check(paths)
        self.past_names = [n for n in self.decoder.inputs if n.startswith("past.")]

    def _check(self, paths: dict[str, Path]) -> None:
        """Each file must be the part it is given as (a swapped or foreign file fails here, in one line)."""
        want = {"encoder": (set(self.encoder_names), "encoder_hidden_states"),
                "decoder": ({"input_ids", "encoder_attention_mask"}, "logits")}
        if self.use_cache:
            want["cache_generator"] = ({"encoder_hidden_states"}, "cross.0.key")
            want["decoder"] = (want["decoder"][0] | {"past.0.key", "cross.0.key"}, "logits")
        else:
            want["decoder"] = (want["decoder"][0] | {"encoder_hidden_states"}, "logits")
        for part, (inputs, first_output) in want.items():
            graph = getattr(self, part)
            if not inputs <= set(graph.inputs) or graph.output_names[0] != first_output:
                cache = "with" if self.use_cache else "without"
                raise ArtifactError(
                    f"{paths[part]} is not the {part} graph {cache} KV cache as this harness exports it "
                    f"(inputs: {', '.join(graph.inputs)}; outputs: {', '.join(graph.output_names[:3])})")

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        hidden = self.encoder.run(encoder_inputs)[0]  # [B, S, D]
        mask = encoder_mask(encoder_inputs, hidden)
        if not self.use_cache:
            return Seq2SeqCache(hidden, mask)
        cross = tuple(self.cache_generator.run({"encoder_hidden_states": hidden}))
        rows = hidden.shape[0]
        past = tuple(empty_past(self.decoder.inputs[n], rows, self.decoder.dtype(n), self.device)
                     for n in self.past_names)
        return Seq2SeqCache(None, mask, (past, cross))  # the decoder reads only the cross keys/values now

    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        feeds = {"input_ids": input_ids, "encoder_attention_mask": cache.encoder_mask}
        if not self.use_cache:
            feeds["encoder_hidden_states"] = cache.encoder_hidden
            return self.decoder.run(feeds)[0], cache
        past, cross = cache.kv
        feeds.update(zip(self.past_names, past))
        feeds.update(zip([n.replace("past.", "cross.") for n in self.past_names], cross))
        outputs = self.decoder.run(feeds, {"total": past[0].shape[2] + input_ids.shape[1]})
        return outputs[0], cache.with_kv((tuple(outputs[1:]), cross))

    def new_cache(self, batch: int, max_length: int):
        raise TypeError("an encoder-decoder cache comes from start(encoder_inputs)")  # internal misuse

    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        kv = None
        if cache.kv is not None:
            past, cross = cache.kv
            if cache.moves_inputs(index, within_inputs):  # beam steps keep each input's (identical) cross keys/values
                cross = tuple(t.index_select(0, index) for t in cross)
            kv = (tuple(t.index_select(0, index) for t in past), cross)
        return cache.select(index, kv, within_inputs)

    def close(self) -> None:
        for graph in (self.encoder, self.decoder, self.cache_generator):
            if graph is not None:
                graph.close()
