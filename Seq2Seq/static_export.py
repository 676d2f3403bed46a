"""The encoder-decoder kind's static-cache ONNX export (what `trt --static-cache` builds its engines from), validated
against PyTorch.

    encoder, cache_generator   as the growing-cache export (`Seq2Seq.export`)
    decoder (static):          input_ids [batch, 1], cache_position [1] (the decoder position written),
                               encoder_attention_mask [batch, encoder_seq],
                               past.{i}.key / .value [batch, heads, max_length, head_dim],
                               cross.{i}.key / .value [batch, heads, encoder_seq, head_dim]
                               -> logits [batch, 1, vocab], present.{i}.* = past.{i}.* with this token's keys and
                               values written at cache_position

The decoder graph is the family's fused one-token step (`Seq2Seq.fused_step.FusedSeq2SeqStep.one_token`, run
eagerly: plain F.linear products, one-query attention over the whole buffer masked by column <= cache_position,
the cache write an index_put the exporter emits as ScatterND) over a slot made of the graph's inputs, so nothing here
knows a family's modules, and the graph has only standard ONNX ops (no ONNX Runtime contrib ops: TensorRT parses
it). The graph does not mutate its inputs: the past buffers are cloned, written and returned as present. Every
decoder pass is one token per row, the first (decoder position 0) included; a longer decoder prompt runs one pass
per token (`Seq2Seq.trt_static_steps`).

Validation runs the three graphs on ONNX Runtime for a right-padded encoder batch, four one-token passes carrying
the buffers between calls, and compares every pass's logits with HF's own model teacher-forced over the same
decoder tokens.
"""
from __future__ import annotations

from pathlib import Path

import torch
from transformers.modeling_outputs import BaseModelOutput

from CausalLM.fused_step import FusedSettings
from NNDF.backends.onnxrt.export import ExportSpec, LogitsCheck, export_graph
from NNDF.errors import UsageError
from Seq2Seq.export import (TEXT_ENCODER, EncoderInputs, _CacheGeneratorGraph, _examples, _export_encoder,
                            dim_names, kv_names)
from Seq2Seq.fused_step import Seq2SeqSlot

# the step the export traces: plain torch ops (eager: F.linear products, plain-op attention), whatever the steps'
# default runs (on CUDA our Triton kernels, which are not ONNX)
EXPORT_SETTINGS = FusedSettings()

VALIDATION_LENGTH = 7  # the validation buffers' decoder positions (4 are written)
DECODER_INPUTS = ["input_ids", "cache_position", "encoder_attention_mask"]


def static_dim_names(name: str) -> list | None:
    """`Seq2Seq.export.dim_names` for the static decoder: the buffers have the generation's full length and every
    pass is one token (fixed)."""
    if name.startswith(("past.", "present.")):
        return ["batch", None, "max_length", None]
    return {"input_ids": ["batch", None], "logits": ["batch", None, None], "cache_position": [None]}.get(name,
                                                                                                    dim_names(name))


def step_class(run):
    """The family's `FusedSeq2SeqStep` class for the run's model type (the steps `frameworks --static-cache` runs),
    or UsageError naming the model types that have one."""
    if run.bind is None:  # internal misuse: runs are opened through the registry (`open_run` sets `bind`)
        raise TypeError("the static export needs the run's bound backends (run.bind)")
    fused = run.bind("frameworks").fused
    kind = run.source.config.model_type
    if kind not in fused:
        raise UsageError(f"--static-cache: trt builds the static decoder from the family's static-cache step, and "
                         f"model type {kind!r} has none (model types with one: {', '.join(fused) or 'none'}); "
                         "drop --static-cache")
    return fused[kind]


class StaticDecoderGraph(torch.nn.Module):
    """(input_ids, cache_position, encoder_attention_mask, *past, *cross) -> (logits, *present): `step.one_token`
    over a slot of the graph's inputs (past cloned: the graph does not mutate its inputs)."""

    def __init__(self, step, layers: int):
        super().__init__()
        self.step, self.layers = step, layers

    def forward(self, input_ids, cache_position, encoder_attention_mask, *kv):
        n = 2 * self.layers
        past = [t.clone() for t in kv[:n]]
        slot = Seq2SeqSlot(input_ids.shape[0], past[0].shape[2], past, list(kv[n:]), encoder_attention_mask,
                           input_ids.device)
        slot.inputs["input_ids"], slot.inputs["cache_position"] = input_ids, cache_position
        logits = self.step.one_token(slot)
        return (logits, *past)


def _decoder_example(ex, write: int, length: int) -> tuple:
    """One-token inputs at decoder position `write`: self-attention buffers of `length` columns holding the
    example's cached keys and values in the first `write` columns (zeros after)."""
    past = []
    for t in ex.past:
        buffer = t.new_zeros(t.shape[0], t.shape[1], length, t.shape[3])
        buffer[:, :, :write] = t[:, :, :write]
        past.append(buffer)
    write_at = torch.tensor([write], device=ex.mask.device)
    return (ex.dec[:, write:write + 1], write_at, ex.mask, *past, *ex.cross)


def export_static(model: torch.nn.Module, step, out_dir: Path, spec: ExportSpec,
                  encoder: EncoderInputs = TEXT_ENCODER) -> dict[str, Path]:
    """Export encoder, cache_generator and the static decoder (`step`: the family's eager `FusedSeq2SeqStep` of
    `model`) to `out_dir/<part>.onnx`; returns {part: path}."""
    ex = _examples(model, encoder)
    layers, auto = ex.layers, torch.export.Dim.AUTO
    paths = {part: out_dir / f"{part}.onnx" for part in ("encoder", "cache_generator", "decoder")}
    _export_encoder(model, ex.encoder, paths["encoder"], spec, encoder)
    export_graph(model, _CacheGeneratorGraph(model), (ex.hidden,), ["encoder_hidden_states"],
                 kv_names("cross", layers), ({0: auto, 1: auto},), dim_names, paths["cache_generator"], spec)
    args = _decoder_example(ex, write=3, length=VALIDATION_LENGTH + 2)
    dynamic = ({0: auto}, None, {0: auto, 1: auto}, tuple([{0: auto, 2: auto}] * (4 * layers)))
    export_graph(model, StaticDecoderGraph(step, layers), args,
                 DECODER_INPUTS + kv_names("past", layers) + kv_names("cross", layers),
                 ["logits"] + kv_names("present", layers), dynamic, static_dim_names, paths["decoder"], spec)
    return paths


def validate_static(model: torch.nn.Module, paths: dict[str, Path], device, spec: ExportSpec, fp16: bool,
                    encoder: EncoderInputs = TEXT_ENCODER, threads: int = 0) -> float:
    """The exported graphs on ONNX Runtime against HF's model: the right-padded example batch, four one-token
    decoder passes (position 0 the first) with the buffers carried from each pass's present to the next's past;
    every pass's logits compared with HF's teacher-forced logits at that position. Returns the max abs difference,
    or raises listing every mismatch (fp16: relative to the logits' scale)."""
    from NNDF.backends.onnxrt.steps import OrtGraph

    ex = _examples(model, encoder)
    graphs = {part: OrtGraph(path, torch.device(device), threads) for part, path in paths.items()}
    hidden = graphs["encoder"].run({n: ex.encoder[n] for n in encoder.names})[0]
    cross = graphs["cache_generator"].run({"encoder_hidden_states": hidden})
    layers = len(cross) // 2
    past = [t.new_zeros(t.shape[0], t.shape[1], VALIDATION_LENGTH, t.shape[3]) for t in cross]
    names = DECODER_INPUTS + kv_names("past", layers) + kv_names("cross", layers)
    steps = 4
    with torch.inference_mode():
        ref = model(encoder_outputs=BaseModelOutput(last_hidden_state=ex.hidden), attention_mask=ex.mask,
                    decoder_input_ids=ex.dec[:, :steps], use_cache=False).logits
    check = LogitsCheck(spec, fp16)
    for t in range(steps):
        feeds = (ex.dec[:, t:t + 1], torch.tensor([t], device=ex.mask.device), ex.mask, *past, *cross)
        logits, *past = graphs["decoder"].run(dict(zip(names, feeds)))
        check.add(f"decoder pass at position {t}", ref[:, t:t + 1], logits)
    graphs.clear()
    return check.worst()
