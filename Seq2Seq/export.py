"""ONNX export of an encoder-decoder model in three graphs, validated against PyTorch.

    encoder:          its declared inputs (`EncoderInputs`; text: input_ids, attention_mask [batch, encoder_seq])
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
every decoder graph: it reaches every cross-attention. No config attribute is read: the decoder depth is the
number of layers HF's cache fills in an example pass, the hidden size the encoder output's last dimension, the
vocabulary size `ModelDims`'.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from transformers import EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from NNDF.backends.onnxrt.export import ExportSpec, LogitsCheck, export_graph
from NNDF.model_config import ModelDims
from Seq2Seq.torch_steps import Seq2SeqTorchSteps, empty_kv, encoder_mask


@dataclass(frozen=True)
class EncoderInputs:
    """What the encoder graph reads, as the kind of encoder declares it (text here, `Vision2Seq`'s pixels): input
    names, each input's dimension names (a name: dynamic, the label TensorRT profiles read; None: fixed at the
    example's size), and example values for the exporter."""

    names: tuple[str, ...]
    dims: tuple[tuple[str | None, ...], ...]  # per input, per dimension
    example: Callable  # (model, generator) -> {name: tensor} with batch 2

    @property
    def dynamic_axes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(axis for axis, label in enumerate(dims) if label) for dims in self.dims)

    def dim_names(self, name: str) -> list | None:
        """The encoder graph's dimension names: its inputs' as declared, its output's as every graph's."""
        return list(self.dims[self.names.index(name)]) if name in self.names else dim_names(name)


def _text_example(model, gen) -> dict:
    device = next(model.parameters()).device
    ids = torch.randint(0, ModelDims.of(model.config).vocab, (2, 6), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # row 1 right-padded
    return {"input_ids": ids, "attention_mask": mask}


TEXT_ENCODER = EncoderInputs(("input_ids", "attention_mask"), (("batch", "encoder_seq"),) * 2, _text_example)


def kv_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def dim_names(name: str) -> list | None:
    """Dimension names of the decoder-side tensors (every graph but the encoder's inputs)."""
    fixed = {"input_ids": ["batch", "seq"], "encoder_attention_mask": ["batch", "encoder_seq"],
             "logits": ["batch", "seq", None], "encoder_hidden_states": ["batch", "encoder_seq", None]}
    prefix = name.split(".")[0]
    return {"past": ["batch", None, "past", None], "present": ["batch", None, "total", None],
            "cross": ["batch", None, "encoder_seq", None]}.get(prefix, fixed.get(name))


def _flat(cache) -> list[torch.Tensor]:
    """A `DynamicCache`'s keys and values, layer by layer: [key 0, value 0, key 1, ...]."""
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


class _EncoderGraph(torch.nn.Module):
    def __init__(self, model, names: tuple[str, ...]):
        super().__init__()
        self.encoder, self.names = model.get_encoder(), names

    def forward(self, *inputs):
        return self.encoder(**dict(zip(self.names, inputs))).last_hidden_state


class _CacheGeneratorGraph(torch.nn.Module):
    """encoder_hidden_states -> every decoder layer's cross-attention keys and values: HF's first decoder step,
    of which the exporter keeps only the cross-attention projections. They read the encoder output alone, so the
    decoder token fed here is arbitrary (0); validation compares a cached step that reads them with PyTorch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, encoder_hidden_states):
        token = torch.zeros_like(encoder_hidden_states[:, :1, 0], dtype=torch.long)  # [B, 1]
        cache = empty_kv()
        self.model(encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
                   decoder_input_ids=token, past_key_values=cache, use_cache=True)
        return tuple(_flat(cache.cross_attention_cache))


class _DecoderGraph(torch.nn.Module):
    """With a cache: (ids, encoder mask, *past, *cross) -> (logits, *present); without: (ids, hidden, mask)."""

    def __init__(self, model, use_cache: bool, layers: int = 0, hidden_size: int = 0):
        super().__init__()
        self.model, self.use_cache, self.layers, self.hidden_size = model, use_cache, layers, hidden_size

    def forward(self, input_ids, second, *rest):
        if not self.use_cache:
            hidden, mask = second, rest[0]
            return self.model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                              decoder_input_ids=input_ids, use_cache=False).logits
        mask, kv = second, rest
        n = 2 * self.layers
        past, cross = kv[:n], kv[n:]
        cache = empty_kv()
        for i in range(self.layers):
            cache.self_attention_cache.update(past[2 * i], past[2 * i + 1], i)
            cache.cross_attention_cache.update(cross[2 * i], cross[2 * i + 1], i)
        cache = EncoderDecoderCache(cache.self_attention_cache, cache.cross_attention_cache)  # cross marked filled
        # the encoder output itself is not read (cross keys/values are cached); only its shape reaches the masks
        hidden = mask[:, :, None].to(cross[0].dtype).expand(-1, -1, self.hidden_size)
        out = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
                         decoder_input_ids=input_ids, past_key_values=cache, use_cache=True)
        return (out.logits, *_flat(out.past_key_values.self_attention_cache))


@dataclass(frozen=True)
class _Examples:
    """Example inputs (batch 2, text encoders' row 1 right-padded, 3 cached decoder positions: the exporter
    specialises dimensions of size 0 and 1), and what the model's own example pass says about its shape."""

    encoder: dict  # the encoder's inputs
    mask: torch.Tensor  # encoder padding mask [2, S]
    hidden: torch.Tensor  # encoder output [2, S, hidden]
    dec: torch.Tensor  # decoder tokens [2, 5]
    past: list  # self-attention keys/values of dec[:, :3], per layer
    cross: list  # cross-attention keys/values, per layer

    @property
    def layers(self) -> int:
        """Decoder depth: the layers HF's `EncoderDecoderCache` filled in the example pass."""
        return len(self.past) // 2

    @property
    def hidden_size(self) -> int:
        return self.hidden.shape[-1]


def _examples(model, encoder: EncoderInputs) -> _Examples:
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    inputs = encoder.example(model, gen)
    dec = torch.randint(0, ModelDims.of(model.config).vocab, (2, 5), generator=gen).to(device)
    with torch.inference_mode():
        hidden = model.get_encoder()(**inputs).last_hidden_state
        mask = encoder_mask(inputs, hidden)
        cache = empty_kv()
        model(encoder_outputs=BaseModelOutput(last_hidden_state=hidden), attention_mask=mask,
              decoder_input_ids=dec[:, :3], past_key_values=cache, use_cache=True)
    past = [t.clone() for t in _flat(cache.self_attention_cache)]
    cross = [t.clone() for t in _flat(cache.cross_attention_cache)]
    return _Examples(inputs, mask, hidden.clone(), dec, past, cross)


def export_seq2seq(model: torch.nn.Module, out_dir: Path, use_cache: bool, spec: ExportSpec,
                   encoder: EncoderInputs = TEXT_ENCODER) -> dict[str, Path]:
    """Export the parts a run needs to `out_dir/<part>.onnx`; returns {part: path}."""
    ex = _examples(model, encoder)
    layers = ex.layers
    auto = torch.export.Dim.AUTO
    paths = {"encoder": out_dir / "encoder.onnx", "decoder": out_dir / "decoder.onnx"}
    _export_encoder(model, ex.encoder, paths["encoder"], spec, encoder)
    if use_cache:
        paths["cache_generator"] = out_dir / "cache_generator.onnx"
        export_graph(model, _CacheGeneratorGraph(model), (ex.hidden,), ["encoder_hidden_states"],
                     kv_names("cross", layers), ({0: auto, 1: auto},), dim_names, paths["cache_generator"], spec)
        kv = [{0: auto, 2: auto}] * (4 * layers)
        export_graph(model, _DecoderGraph(model, True, layers, ex.hidden_size),
                     (ex.dec[:, 3:], ex.mask, *ex.past, *ex.cross),
                     ["input_ids", "encoder_attention_mask"] + kv_names("past", layers) + kv_names("cross", layers),
                     ["logits"] + kv_names("present", layers),
                     ({0: auto, 1: auto}, {0: auto, 1: auto}, tuple(kv)), dim_names, paths["decoder"], spec)
    else:
        export_graph(model, _DecoderGraph(model, False), (ex.dec, ex.hidden, ex.mask),
                     ["input_ids", "encoder_hidden_states", "encoder_attention_mask"], ["logits"],
                     ({0: auto, 1: auto}, {0: auto, 1: auto}, ({0: auto, 1: auto},)), dim_names, paths["decoder"],
                     spec)
    return paths


def _export_encoder(model, example: dict, path: Path, spec: ExportSpec, encoder: EncoderInputs) -> None:
    auto = torch.export.Dim.AUTO
    export_graph(model, _EncoderGraph(model, encoder.names), tuple(example[n] for n in encoder.names),
                 list(encoder.names), ["encoder_hidden_states"],
                 (tuple({axis: auto for axis in axes} for axes in encoder.dynamic_axes),), encoder.dim_names,
                 path, spec)


def export_encoder(model: torch.nn.Module, path: Path, spec: ExportSpec, encoder: EncoderInputs = TEXT_ENCODER) -> None:
    """The encoder graph alone (as `export_seq2seq` exports it) to `path`."""
    _export_encoder(model, encoder.example(model, torch.Generator().manual_seed(0)), path, spec, encoder)


def validate(model: torch.nn.Module, steps_factory, use_cache: bool, spec: ExportSpec, fp16: bool,
             encoder_spec: EncoderInputs = TEXT_ENCODER) -> float:
    """Run the exported graphs (`steps_factory()`, a `Seq2SeqOrtSteps`) and PyTorch on the same right-padded
    encoder batch: a two-token decoder pass and, with a cache, one cached step (which reads every cached self-
    and cross-attention key and value). Return the max abs logits difference, or raise listing every mismatch.
    fp16 logits are compared relative to their scale (max |logit|)."""
    ex = _examples(model, encoder_spec)
    ref, ort = Seq2SeqTorchSteps(model, use_cache), steps_factory()
    caches = [ref.start(ex.encoder), ort.start(ex.encoder)]
    cases = [("decoder pass", slice(0, 2))] + ([("cached step", slice(2, 3))] if use_cache else [])
    check = LogitsCheck(spec, fp16)
    for label, cols in cases:
        sub = ex.dec[:, cols] if use_cache else ex.dec[:, : cols.stop]
        ones = torch.ones_like(sub)
        ref_logits, caches[0] = ref.forward(sub, ones, ones, caches[0])
        ort_logits, caches[1] = ort.forward(sub, ones, ones, caches[1])
        check.add(label, ref_logits, ort_logits)
    ort.close()
    return check.worst()
