"""The decoder-only kind's ONNX export: the decoder with LM head and KV cache, validated against PyTorch.

One graph serves both the prompt pass (past length 0) and the one-token steps:

    input_ids [batch, seq], attention_mask [batch, total], position_ids [batch, seq] (if the model takes them),
    past.{i}.key / past.{i}.value [batch, heads, past, head_dim]
    -> logits [batch, seq, vocab], present.{i}.key / present.{i}.value [batch, heads, total, head_dim]

Without the cache the graph is input_ids, attention_mask[, position_ids] -> logits. The static-cache graph
(`static=True`, HF's StaticCache inside) has fixed-length buffers and a write position instead:

    input_ids [batch, seq], attention_mask [batch, max_length], position_ids [batch, seq], cache_position [] (where
    this pass's first token goes), past.{i}.key / past.{i}.value [batch, heads, max_length, head_dim]
    -> logits [batch, seq, vocab], present.{i}.* = past.{i}.* with the new keys and values written in place

so every one-token step has the same shapes, and ONNX Runtime can write `present` into `past`'s own buffer
(the update is a ScatterND that runs in place when its input and output share memory). The shared exporter
(`NNDF.backends.onnxrt.export.export_graph`) gives the symbolic dimensions readable names, stores tied weights once
and keeps the weights of models over 2 GB in external data. Validation runs the file on ONNX Runtime for a padded
prompt pass and a cached step and reports the largest difference from PyTorch; above the tolerance it fails with
every mismatch listed.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import torch
from transformers import DynamicCache

from NNDF.backends.onnxrt.export import ExportSpec, LogitsCheck, export_graph
from NNDF.model_config import ModelDims


def graph_names(num_layers: int, use_cache: bool, takes_positions: bool,
                static: bool = False) -> tuple[list[str], list[str]]:
    inputs = ["input_ids", "attention_mask"] + (["position_ids"] if takes_positions else [])
    inputs += ["cache_position"] if static else []
    outputs = ["logits"]
    if use_cache:
        inputs += [f"past.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value")]
        outputs += [f"present.{i}.{kv}" for i in range(num_layers) for kv in ("key", "value")]
    return inputs, outputs


def takes_position_ids(model: torch.nn.Module) -> bool:
    return "position_ids" in inspect.signature(model.forward).parameters


class _DecoderGraph(torch.nn.Module):
    """Flat-tensor wrapper: (ids, mask[, positions], *past) -> (logits, *present)."""

    def __init__(self, model: torch.nn.Module, use_cache: bool, takes_positions: bool):
        super().__init__()
        self.model, self.use_cache, self.takes_positions = model, use_cache, takes_positions
        self.num_layers = ModelDims.of(model.config).layers

    def forward(self, input_ids, attention_mask, *rest):
        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, use_cache=self.use_cache)
        if self.takes_positions:
            kwargs["position_ids"], rest = rest[0], rest[1:]
        if self.use_cache:
            cache = DynamicCache()
            for i in range(self.num_layers):
                cache.update(rest[2 * i], rest[2 * i + 1], i)
            kwargs["past_key_values"] = cache
        out = self.model(**kwargs)
        if not self.use_cache:
            return out.logits
        presents = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *presents)


class _StaticDecoderGraph(_DecoderGraph):
    """(ids, mask[, positions], cache_position, *past) -> (logits, *present) over HF's StaticCache: the layers
    are HF's own, their buffers are the graph's past inputs (cloned: the graph does not mutate its inputs) and
    their write position is `cache_position`; the buffers' length stays symbolic (max_length)."""

    def forward(self, input_ids, attention_mask, *rest):
        from CausalLM.torch_steps import full_length_static_cache

        kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
        if self.takes_positions:
            kwargs["position_ids"], rest = rest[0], rest[1:]
        write, past = rest[0], rest[1:]
        cache = full_length_static_cache(self.model.config, past[0].shape[2])
        for i, layer in enumerate(cache.layers):
            layer.lazy_initialization(past[2 * i], past[2 * i + 1])
            layer.keys, layer.values = past[2 * i].clone(), past[2 * i + 1].clone()
            layer.cumulative_length = write.clone()
        out = self.model(**kwargs, past_key_values=cache)
        return (out.logits, *[t for layer in cache.layers for t in (layer.keys, layer.values)])


def _static_example(model, batch: int, seq: int, past: int, spare: int, takes_positions: bool):
    """`_example` with the cache in buffers of past + seq + spare positions (zeros after the written ones) and a
    full-width mask (1 beyond the written columns, as the static steps pass it)."""
    head_len = 3 if takes_positions else 2
    args = _example(model, batch, seq, past, use_cache=True, takes_positions=takes_positions)
    head, flat = args[:head_len], args[head_len:]
    mask = torch.cat([head[1], head[1].new_ones(batch, spare)], dim=1)
    buffers = []
    for t in flat:
        buffer = t.new_zeros(t.shape[0], t.shape[1], past + seq + spare, t.shape[3])
        buffer[:, :, :past] = t
        buffers.append(buffer)
    write = torch.tensor(past, device=mask.device)
    return (head[0], mask, *head[2:], write, *buffers)


def _example(model, batch: int, seq: int, past: int, use_cache: bool, takes_positions: bool):
    """Example inputs: random ids with row 0 left-padded; with a cache, `past` tokens already run through
    the model (past > 0: the exporter specialises dimensions of size 0 and 1)."""
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, ModelDims.of(model.config).vocab, (batch, past + seq), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[0, : min(2, past + seq - 1)] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    if not use_cache:
        return (ids, mask, positions)[: 3 if takes_positions else 2]
    cache = DynamicCache(config=model.config)
    kwargs = dict(input_ids=ids[:, :past], attention_mask=mask[:, :past], past_key_values=cache, use_cache=True)
    if takes_positions:
        kwargs["position_ids"] = positions[:, :past]
    with torch.inference_mode():
        model(**kwargs)
    flat = [t.clone() for layer in cache.layers for t in (layer.keys, layer.values)]
    head = (ids[:, past:], mask, positions[:, past:]) if takes_positions else (ids[:, past:], mask)
    return (*head, *flat)


def export_decoder(model: torch.nn.Module, out_dir: Path, use_cache: bool, spec: ExportSpec,
                   static: bool = False) -> Path:
    """Export `model` to `out_dir/model.onnx` (+ `model.onnx.data` when large); returns the .onnx path."""
    if static:
        return _export_static_decoder(model, out_dir, spec)
    takes_positions = takes_position_ids(model)
    inputs, outputs = graph_names(ModelDims.of(model.config).layers, use_cache, takes_positions)
    args = _example(model, batch=2, seq=3, past=4 if use_cache else 0, use_cache=use_cache,
                    takes_positions=takes_positions)
    auto = torch.export.Dim.AUTO  # let torch.export name and relate the dims (total = past + seq)
    rest = [{0: auto, 1: auto}] if takes_positions else []  # forward(ids, mask, *rest)
    rest += [{0: auto, 2: auto}] * (len(args) - 2 - len(rest))
    dynamic = ({0: auto, 1: auto}, {0: auto, 1: auto}) + ((tuple(rest),) if rest else ())
    path = out_dir / "model.onnx"
    export_graph(model, _DecoderGraph(model, use_cache, takes_positions), args, inputs, outputs, dynamic,
                 decoder_dim_names, path, spec)
    return path


def _export_static_decoder(model: torch.nn.Module, out_dir: Path, spec: ExportSpec) -> Path:
    from CausalLM.torch_steps import check_static_cache_support

    check_static_cache_support(model)  # the graph runs HF's StaticCache code
    takes_positions = takes_position_ids(model)
    inputs, outputs = graph_names(ModelDims.of(model.config).layers, True, takes_positions, static=True)
    args = _static_example(model, batch=2, seq=3, past=4, spare=2, takes_positions=takes_positions)
    auto = torch.export.Dim.AUTO
    rest = ([{0: auto, 1: auto}] if takes_positions else []) + [None]  # positions, cache_position (a scalar)
    rest += [{0: auto, 2: auto}] * (len(args) - 2 - len(rest))
    dynamic = ({0: auto, 1: auto}, {0: auto, 1: auto}, tuple(rest))
    path = out_dir / "model.onnx"
    export_graph(model, _StaticDecoderGraph(model, True, takes_positions), args, inputs, outputs, dynamic,
                 static_dim_names, path, spec)
    return path


def static_dim_names(name: str) -> list | None:
    """`decoder_dim_names` for the static-cache graph: the mask and the buffers have the full length."""
    if name == "attention_mask" or name.startswith(("past.", "present.")):
        return ["batch", "max_length"] if name == "attention_mask" else ["batch", None, "max_length", None]
    return decoder_dim_names(name)


def decoder_dim_names(name: str) -> list | None:
    """Readable names for the decoder graph's symbolic dimensions (TensorRT profiles and IO binding use them)."""
    fixed = {"input_ids": ["batch", "seq"], "attention_mask": ["batch", "total"], "position_ids": ["batch", "seq"],
             "logits": ["batch", "seq", None]}
    if name.startswith("past."):
        return ["batch", None, "past", None]
    if name.startswith("present."):
        return ["batch", None, "total", None]
    return fixed.get(name)



def validate(model: torch.nn.Module, steps_factory, use_cache: bool, spec: ExportSpec, fp16: bool) -> float:
    """Run the exported graph (through `steps_factory()`, an `OrtSteps`) and PyTorch on the same padded
    prompt pass and, with a cache, one cached step (whose logits depend on every cached key and value).
    Return the max abs difference of logits at real (unpadded) positions, or raise listing every mismatch.
    fp16 logits are compared relative to their scale (max |logit|)."""
    from CausalLM.torch_steps import TorchSteps

    ref_steps, ort_steps = TorchSteps(model, use_cache), steps_factory()
    full = _example(model, batch=2, seq=6, past=0, use_cache=False, takes_positions=True)
    ids, mask, positions = full
    check = LogitsCheck(spec, fp16)
    cases = [("prompt pass", slice(0, 5))] + ([("cached step", slice(5, 6))] if use_cache else [])
    caches = [ref_steps.new_cache(2, 6), ort_steps.new_cache(2, 6)]
    for label, cols in cases:
        sub = (ids[:, cols], mask[:, : cols.stop], positions[:, cols]) if use_cache else \
              (ids[:, : cols.stop], mask[:, : cols.stop], positions[:, : cols.stop])
        ref_logits, caches[0] = ref_steps.forward(*sub, caches[0])
        ort_logits, caches[1] = ort_steps.forward(*sub, caches[1])
        real = mask[:, cols.stop - ref_logits.shape[1]: cols.stop].bool()  # padded positions are don't-care
        check.add(label, ref_logits, ort_logits, real)
    ort_steps.close()
    return check.worst()
