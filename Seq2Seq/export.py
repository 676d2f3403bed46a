"""ONNX export of an encoder-decoder model in three graphs, validated against PyTorch.

    encoder:          input_ids [batch, encoder_seq], attention_mask [batch, encoder_seq]
                      -> encoder_hidden_states [batch, encoder_seq, hidden]
    cache_generator:  encoder_hidden_states -> cross.{i}.key / cross.{i}.value [batch, heads, encoder_seq, head_dim]
                      (the cross-attention keys/values, computed once per input: they never change while decoding)
    decoder (KV):     input_ids [batch, seq], encoder_attention_mask [batch, encoder_seq],
                      past.{i}.key / .value [batch, heads, past, head_dim], cross.{i}.key / .value
                      -> logits [batch, seq, vocab], present.{i}.key / .value [batch, heads, total, head_dim]
    decoder (no KV):  input_ids [batch, seq], encoder_hidden_states, encoder_attention_mask -> logits

The graphs wrap the HF model itself (its `EncoderDecoderCache` filled from the flat tensors), so nothing here
knows a family's module names: the cache generator is the HF decoder's first step reduced, by the exporter's
dead-code elimination, to the cross-attention projections. Decoder positions come from the cache length
(decoder prompts are never padded), so there are no position ids. The encoder padding mask is an input of
every decoder graph: it reaches every cross-attention.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from NNDF.backends.onnx_export import ExportSpec, LogitsCheck, export_graph

PARTS = ("encoder", "decoder", "cache_generator")  # file stems; the cache generator only with a KV cache


@dataclass(frozen=True)
class Layout:
    """Decoder depth, start token and hidden size, read from the model (never from a config alias)."""

    layers: int
    start: int
    hidden: int

    @staticmethod
    def of(model) -> "Layout":
        config = model.config
        decoder_layers = getattr(config, "decoder_layers", None) or config.num_decoder_layers
        return Layout(int(decoder_layers), int(config.decoder_start_token_id), int(config.d_model))


@dataclass(frozen=True)
class EncoderInputs:
    """What the encoder graph reads: input names, their dynamic axes, and example values for the exporter."""

    names: tuple[str, ...]
    dynamic_axes: tuple[tuple[int, ...], ...]  # per input
    example: Callable  # (model, generator) -> {name: tensor} with batch 2


def _text_example(model, gen) -> dict:
    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (2, 6), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # row 1 right-padded
    return {"input_ids": ids, "attention_mask": mask}


TEXT_ENCODER = EncoderInputs(("input_ids", "attention_mask"), ((0, 1), (0, 1)), _text_example)


def encoder_mask(encoder_inputs: dict, hidden: torch.Tensor) -> torch.Tensor:
    """The encoder's padding mask [B, S]: the input's own, or all ones (images have no padding)."""
    mask = encoder_inputs.get("attention_mask")
    if mask is None:
        mask = torch.ones(hidden.shape[:2], dtype=torch.long, device=hidden.device)
    return mask


def kv_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def encoder_dim_names(name: str) -> list | None:
    """The encoder graph's dimensions: its token inputs are the encoder's sequence."""
    if name in ("input_ids", "attention_mask"):
        return ["batch", "encoder_seq"]
    return dim_names(name)


def dim_names(name: str) -> list | None:
    fixed = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "encoder_seq"],
             "pixel_values": ["batch", None, None, None],
             "encoder_attention_mask": ["batch", "encoder_seq"], "logits": ["batch", "seq", None],
             "encoder_hidden_states": ["batch", "encoder_seq", None]}
    prefix = name.split(".")[0]
    return {"past": ["batch", None, "past", None], "present": ["batch", None, "total", None],
            "cross": ["batch", None, "encoder_seq", None]}.get(prefix, fixed.get(name))


class _Encoder(torch.nn.Module):
    def __init__(self, model, names: tuple[str, ...]):
        super().__init__()
        self.encoder, self.names = model.get_encoder(), names

    def forward(self, *inputs):
        return self.encoder(**dict(zip(self.names, inputs))).last_hidden_state


def _empty_cache() -> EncoderDecoderCache:
    return EncoderDecoderCache(DynamicCache(), DynamicCache())


class _CacheGenerator(torch.nn.Module):
    """encoder_hidden_states -> every decoder layer's cross-attention keys and values."""

    def __init__(self, model, layout: Layout):
        super().__init__()
        self.model, self.layout = model, layout

    def forward(self, encoder_hidden_states):
        start = torch.full_like(encoder_hidden_states[:, :1, 0], self.layout.start, dtype=torch.long)  # [B, 1]
        cache = _empty_cache()
        self.model(encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
                   decoder_input_ids=start, past_key_values=cache, use_cache=True)
        return tuple(t for layer in cache.cross_attention_cache.layers for t in (layer.keys, layer.values))


class _Decoder(torch.nn.Module):
    """With a cache: (ids, encoder mask, *past, *cross) -> (logits, *present); without: (ids, hidden, mask)."""

    def __init__(self, model, layout: Layout, use_cache: bool):
        super().__init__()
        self.model, self.layout, self.use_cache = model, layout, use_cache
        self.hidden_size = layout.hidden

    def forward(self, input_ids, second, *rest):
        if not self.use_cache:
            hidden, mask = second, rest[0]
            return self.model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                              decoder_input_ids=input_ids, use_cache=False).logits
        mask, kv = second, rest
        n = 2 * self.layout.layers
        past, cross = kv[:n], kv[n:]
        cache = _empty_cache()
        for i in range(self.layout.layers):
            cache.self_attention_cache.update(past[2 * i], past[2 * i + 1], i)
            cache.cross_attention_cache.update(cross[2 * i], cross[2 * i + 1], i)
        cache = EncoderDecoderCache(cache.self_attention_cache, cache.cross_attention_cache)  # cross marked filled
        # the encoder output itself is not read (cross keys/values are cached); only its shape reaches the masks
        hidden = mask[:, :, None].to(cross[0].dtype).expand(-1, -1, self.hidden_size)
        out = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                         decoder_input_ids=input_ids, past_key_values=cache, use_cache=True)
        presents = [t for layer in out.past_key_values.self_attention_cache.layers for t in (layer.keys, layer.values)]
        return (out.logits, *presents)


def _examples(model, encoder: EncoderInputs):
    """Example inputs (batch 2, text encoders' row 1 right-padded, 3 cached decoder positions: the exporter
    specialises dimensions of size 0 and 1)."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    inputs = encoder.example(model, gen)
    dec = torch.randint(0, model.config.vocab_size, (2, 5), generator=gen).to(device)
    with torch.inference_mode():
        hidden = model.get_encoder()(**inputs).last_hidden_state
        mask = encoder_mask(inputs, hidden)
        cache = _empty_cache()
        model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
              decoder_input_ids=dec[:, :3], past_key_values=cache, use_cache=True)
    past = [t.clone() for layer in cache.self_attention_cache.layers for t in (layer.keys, layer.values)]
    cross = [t.clone() for layer in cache.cross_attention_cache.layers for t in (layer.keys, layer.values)]
    return inputs, mask, hidden.clone(), dec, past, cross


def export_seq2seq(model: torch.nn.Module, out_dir: Path, use_cache: bool, spec: ExportSpec,
                   encoder: EncoderInputs = TEXT_ENCODER) -> dict[str, Path]:
    """Export the parts a run needs to `out_dir/<part>.onnx`; returns {part: path}."""
    layout = Layout.of(model)
    inputs, mask, hidden, dec, past, cross = _examples(model, encoder)
    auto = torch.export.Dim.AUTO
    paths = {"encoder": out_dir / "encoder.onnx", "decoder": out_dir / "decoder.onnx"}
    export_graph(model, _Encoder(model, encoder.names), tuple(inputs[n] for n in encoder.names), list(encoder.names),
                 ["encoder_hidden_states"], (tuple({axis: auto for axis in axes} for axes in encoder.dynamic_axes),),
                 encoder_dim_names, paths["encoder"], spec)
    if use_cache:
        paths["cache_generator"] = out_dir / "cache_generator.onnx"
        export_graph(model, _CacheGenerator(model, layout), (hidden,), ["encoder_hidden_states"],
                     kv_names("cross", layout.layers), ({0: auto, 1: auto},), dim_names, paths["cache_generator"],
                     spec)
        kv = [{0: auto, 2: auto}] * (4 * layout.layers)
        export_graph(model, _Decoder(model, layout, True), (dec[:, 3:], mask, *past, *cross),
                     ["input_ids", "encoder_attention_mask"] + kv_names("past", layout.layers)
                     + kv_names("cross", layout.layers), ["logits"] + kv_names("present", layout.layers),
                     ({0: auto, 1: auto}, {0: auto, 1: auto}, tuple(kv)), dim_names, paths["decoder"], spec)
    else:
        export_graph(model, _Decoder(model, layout, False), (dec, hidden, mask),
                     ["input_ids", "encoder_hidden_states", "encoder_attention_mask"], ["logits"],
                     ({0: auto, 1: auto}, {0: auto, 1: auto}, ({0: auto, 1: auto},)), dim_names, paths["decoder"],
                     spec)
    return paths


def validate(model: torch.nn.Module, steps_factory, use_cache: bool, spec: ExportSpec, fp16: bool,
             encoder_spec: EncoderInputs = TEXT_ENCODER) -> float:
    """Run the exported graphs (`steps_factory()`, a `Seq2SeqOrtSteps`) and PyTorch on the same right-padded
    encoder batch: a two-token decoder pass and, with a cache, one cached step (which reads every cached self-
    and cross-attention key and value). Return the max abs logits difference, or raise listing every mismatch.
    fp16 logits are compared relative to their scale (max |logit|)."""
    from Seq2Seq.torch_steps import Seq2SeqTorchSteps

    encoder, _, _, dec, _, _ = _examples(model, encoder_spec)
    ref, ort = Seq2SeqTorchSteps(model, use_cache), steps_factory()
    caches = [ref.start(encoder), ort.start(encoder)]
    cases = [("decoder pass", slice(0, 2))] + ([("cached step", slice(2, 3))] if use_cache else [])
    check = LogitsCheck(spec, fp16)
    for label, cols in cases:
        sub = dec[:, cols] if use_cache else dec[:, : cols.stop]
        ones = torch.ones_like(sub)
        ref_logits, caches[0] = ref.forward(sub, ones, ones, caches[0])
        ort_logits, caches[1] = ort.forward(sub, ones, ones, caches[1])
        check.add(label, ref_logits, ort_logits)
    ort.close()
    return check.worst()
