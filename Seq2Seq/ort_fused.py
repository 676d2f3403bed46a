"""`onnxrt --static-cache` for encoder-decoders: the family's graphs built from the weights (a
`Seq2Seq.fused_graph.Seq2SeqBuilder`: ONNX Runtime's fused attention ops, the decoder's self-attention cache
written in place) as a stored artifact, and the steps that drive them.

    encoder.onnx  the encoder, text or image (built by the family's builder; the kind's torch.onnx export where a
                  builder's `parts` leave it out)
    cross.onnx    encoder_hidden_states -> every decoder layer's cross-attention keys and values
    decoder.onnx  one decoder pass over full-length self-attention buffers bound as past and present

`Seq2SeqFusedOnnx` is fingerprinted (config, weights, precision, builder version, onnx and onnxruntime versions),
validated against PyTorch at build time on a right-padded encoder batch (a two-token decoder pass and two
one-token steps; the graphs run first and are closed before the PyTorch model is loaded) and cached as
`<prefix>-<precision>-fused/`.

`Seq2SeqOrtFusedSteps` keeps one `Seq2SeqSlot` per (rows, max_length, encoder_length): `start` runs the encoder,
copies the encoder mask into the slot and runs the cross graph with its outputs bound to the slot's cross buffers;
the decoder prompt (every row the same length: decoder prompts are never padded) writes columns 0..S-1; each
one-token step is bound once per slot (ids, positions, per-row lengths `seqlens_k`, the encoder mask, the buffers,
the logits) and replayed from ONNX Runtime's CUDA graph. `total_sequence_length` is a host scalar the attention
kernel reads on the CPU; a captured graph freezes it, so one-token steps always pass the buffer length (the
kernel then tells a step from a prompt pass by S == 1 and reads the lengths from `seqlens_k` on the device).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from CausalLM.graph_io import HOST_INPUTS
from CausalLM.ort_fused import BuiltGraphs, check_builds
from NNDF.backends.onnxrt.artifact import GraphArtifact
from NNDF.backends.onnxrt.export import LogitsCheck
from NNDF.backends.onnxrt.steps import OrtGraph
from NNDF.context import RunContext
from NNDF.slots import SlotPool, stacked_zeros
from Seq2Seq.fused_step import Seq2SeqSlot, reordered
from Seq2Seq.torch_steps import Seq2SeqCache, static_start

VALIDATION_CACHE = 64  # validation's self-attention buffer length (4 columns are written)
PARTS = ("encoder", "cross", "decoder")


def fused_artifact(base: GraphArtifact, run: RunContext, builder) -> "Seq2SeqFusedOnnx":
    """The built graphs `builder` makes for this run in place of `base` (the kind's export, which still exports
    an encoder the builder leaves out), or UsageError naming why this model, precision or device has none."""
    check_builds(run, builder, "onnxrt --static-cache for encoder-decoders")
    return Seq2SeqFusedOnnx(base, builder)


class Seq2SeqFusedOnnx(BuiltGraphs):
    """The family's encoder-decoder graphs built from the weights (`builder`), the encoder exported by `base` where
    the builder does not build it."""

    what = "encoder-decoder graphs"
    yours = "no --static-cache"

    def __init__(self, base: GraphArtifact, builder):
        super().__init__(base.spec, base.task, builder)
        self.base, self.prefix = base, base.prefix

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return PARTS

    def fingerprint_extra(self) -> dict:
        return {"parts": list(self.builder.parts)}

    def steps(self, run: RunContext, paths: dict[str, Path], cuda_graph: bool | None = None):
        graph = run.options.use_cuda_graph if cuda_graph is None else cuda_graph
        return Seq2SeqOrtFusedSteps(paths, run.device, run.options.threads, graph, self.base.encoder_names)

    def source_model(self, run: RunContext):
        """As `BuiltGraphs`', but the run's PyTorch model whenever the encoder is the torch.onnx export."""
        return super().source_model(run) if "encoder" in self.builder.parts else run.torch_model()

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        """Build the parts (from the checkpoint's files when `model` is None, else from `model`), export the encoder
        where the builder leaves it out, validate (`validate_fused`) and drop the PyTorch model."""
        import time

        from CausalLM import fused_graph

        start = time.perf_counter()
        arch, dtype = run.architecture(), np.float16 if run.options.fp16 else np.float32
        weights = self.weights(run, model, arch, dtype)
        builders: list = []
        linear = self.add_ops(run, out_dir)

        def make_graph(part: str):  # the Linear op where it pays: the decoder's one-token steps
            builders.append(fused_graph.GraphBuilder(dtype, out_dir / f"{part}.onnx.data", linear and part == "decoder",
                                                     self.folds_norms(), self.owns_attention()))
            return builders[-1]

        try:
            protos = self.builder.build(arch, weights, make_graph)
        finally:
            for g in builders:
                g.close()
        del weights, arch
        counts = {}
        for part, proto in protos.items():
            fused_graph.save(proto, out_dir / f"{part}.onnx")
            counts[part] = fused_graph.op_counts(proto)
        if "encoder" not in protos:
            self.base.export_encoder(model, out_dir / "encoder.onnx")
        seconds = time.perf_counter() - start
        diff = validate_fused(run, lambda: self.steps(run, {p: out_dir / f"{p}.onnx" for p in PARTS}, False),
                              lambda: self.base.module(run.torch_model()), self.spec,
                              self.base.validation_encoder(run))
        run.release_torch_model()
        return {"max_abs_diff_vs_pytorch": diff, "nodes": counts,
                "encoder": "built" if "encoder" in protos else "torch.onnx export",
                "built_from": "checkpoint files" if model is None else "PyTorch model",
                "build_seconds": round(seconds, 2)}

    def notes(self) -> tuple[str, ...]:
        nodes = (self.record or {}).get("nodes", {}).get("decoder", {})
        return (f"decoder graph: {sum(nodes.values())} nodes ({', '.join(f'{op} {n}' for op, n in nodes.items())})",)


def validate_fused(run: RunContext, make_steps, reference, spec, encoder_inputs: dict) -> float:
    """The built graphs' logits against PyTorch's (HF's model, growing cache): `encoder_inputs` (two rows, the
    second right-padded where the encoder takes a mask), a two-token decoder pass from the start token and two
    one-token steps in a `VALIDATION_CACHE`-long buffer. The graphs run first and are closed before the PyTorch
    model is loaded (`reference()`: the module Seq2Seq's PyTorch steps run). The max abs difference, or ArtifactError listing every mismatch (`LogitsCheck`)."""
    from Seq2Seq.torch_steps import Seq2SeqTorchSteps

    vocab = run.source.dims.vocab
    ids = torch.randint(0, vocab, (2, 4), generator=torch.Generator().manual_seed(1))
    steps = make_steps()
    try:
        got = _passes(steps, encoder_inputs, ids, VALIDATION_CACHE)
    finally:
        steps.close()
    del steps
    reference = _passes(Seq2SeqTorchSteps(reference(), use_cache=True), encoder_inputs, ids, None)
    check = LogitsCheck(spec, run.options.fp16)
    for (label, _), ref, out in zip(_PASSES, reference, got):
        check.add(label, ref, out)
    return check.worst()


_PASSES = (("decoder pass", slice(0, 2)), ("cached step", slice(2, 3)), ("cached step", slice(3, 4)))


def _passes(steps, encoder_inputs: dict, ids, length: int | None) -> list[torch.Tensor]:
    device = steps.device
    cache = steps.start({k: v.to(device) for k, v in encoder_inputs.items()}, length)
    logits = []
    for _, cols in _PASSES:
        mask = torch.ones(ids.shape[0], cols.stop, dtype=torch.long, device=device)
        out, cache = steps.forward(ids[:, cols].to(device), mask, mask[:, cols], cache)
        logits.append(out.float().cpu().clone())  # a step's logits buffer is reused by the next
    return logits


class Seq2SeqOrtFusedSteps:
    """The encoder-decoder step contract over the built graphs (always a static, in-place self-attention cache)."""

    name = "onnxrt"
    use_cache = True

    def __init__(self, paths: dict[str, Path], device: torch.device, threads: int = 0, cuda_graph: bool = False,
                 encoder_names: tuple[str, ...] = ("input_ids", "attention_mask")):
        self.device, self.cuda_graph, self.encoder_names = device, cuda_graph, encoder_names
        self.encoder = OrtGraph(paths["encoder"], device, threads)
        self.cross_graph = OrtGraph(paths["cross"], device, threads)
        self.decoder = OrtGraph(paths["decoder"], device, threads, cuda_graph, HOST_INPUTS)
        self.past_names = [n for n in self.decoder.inputs if n.startswith("past.")]
        self.present_names = [n for n in self.decoder.output_names if n.startswith("present.")]
        self.cross_names = [n for n in self.decoder.inputs if n.startswith("cross.")]
        self._slots: SlotPool[Seq2SeqSlot] = SlotPool()

    def start(self, encoder_inputs: dict, max_length: int | None = None) -> Seq2SeqCache:
        feeds = {name: encoder_inputs[name] for name in self.encoder_names}
        hidden = self.encoder.run(feeds)[0]  # [B, S, D]
        slot, mask = static_start(self._slot, hidden, encoder_inputs, max_length)
        self.cross_graph.run({"encoder_hidden_states": hidden}, outputs=dict(zip(self.cross_names, slot.cross)))
        return Seq2SeqCache(None, mask, slot)

    def _slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        return self._slots.get((rows, max_length, encoder_length),
                               lambda number: self._new_slot(rows, max_length, encoder_length, number))

    def _new_slot(self, rows: int, max_length: int, encoder_length: int, graph_id: int) -> Seq2SeqSlot:
        """Self-attention buffers [rows, heads, max_length, head_dim] (bound as present too), cross buffers
        [rows, heads, encoder_length, head_dim], and the one-token step's inputs and logits at fixed addresses."""
        device, graph = self.device, self.decoder

        def buffers(names, length):  # one allocation where all agree (beam reordering moves them at once)
            kinds = [(graph.inputs[n].shape[1], graph.inputs[n].shape[3], graph.dtype(n)) for n in names]
            if len(set(kinds)) == 1:
                heads, head_dim, dtype = kinds[0]
                return stacked_zeros(len(names), (rows, heads, length, head_dim), dtype, device)
            return [torch.zeros(rows, heads, length, head_dim, dtype=dtype, device=device)
                    for heads, head_dim, dtype in kinds]

        mask = torch.ones(rows, encoder_length, dtype=torch.long, device=device)
        vocab = graph.outputs["logits"].shape[-1]
        logits = torch.empty(rows, 1, vocab, dtype=graph.dtype("logits"), device=device)
        slot = Seq2SeqSlot(rows, max_length, buffers(self.past_names, max_length),
                           buffers(self.cross_names, encoder_length), mask, device, logits, graph_id)
        slot.inputs["seqlens_k"] = torch.zeros(rows, dtype=torch.int32, device=device)  # total length - 1 per row
        slot.inputs["total_sequence_length"] = torch.tensor(max_length, dtype=torch.int32)  # host, frozen by a graph
        return slot

    def forward(self, input_ids, attention_mask, position_ids, cache: Seq2SeqCache, last_only=False):
        slot, length, seq = cache.kv, attention_mask.shape[1], input_ids.shape[1]
        if seq > 1 or length == 1:
            if length != seq:
                raise TypeError("a multi-token decoder pass must start at column 0")  # internal misuse
            return self._prompt(input_ids, slot), cache
        slot.set_length(length)
        slot.inputs["seqlens_k"].fill_(length - 1)
        slot.ids.copy_(input_ids)
        slot.positions.fill_(length - 1)
        if slot.binding is None:
            feeds = {**self._step_feeds(slot), **dict(zip(self.past_names, slot.past))}
            outputs = {"logits": slot.logits, **dict(zip(self.present_names, slot.past))}
            slot.binding = self.decoder.bind(feeds, outputs)
        options = self.decoder.run_options(slot.graph_id) if self.cuda_graph else None
        self.decoder.run_bound(slot.binding, options)
        return slot.logits, cache

    def _step_feeds(self, slot: Seq2SeqSlot) -> dict:
        names = ("input_ids", "position_ids", "seqlens_k", "total_sequence_length")
        return {**{n: slot.inputs[n] for n in names}, "encoder_attention_mask": slot.encoder_mask,
                **dict(zip(self.cross_names, slot.cross))}

    def _prompt(self, input_ids, slot: Seq2SeqSlot) -> torch.Tensor:
        """The decoder prompt [rows, S] at columns 0..S-1, uncaptured; logits [rows, S, V]."""
        rows, seq = input_ids.shape
        positions = torch.arange(seq, device=input_ids.device).expand(rows, seq)
        seqlens = torch.full((rows,), seq - 1, dtype=torch.int32, device=input_ids.device)
        feeds = {"input_ids": input_ids, "position_ids": positions, "seqlens_k": seqlens,
                 "total_sequence_length": torch.tensor(seq, dtype=torch.int32),
                 "encoder_attention_mask": slot.encoder_mask, **dict(zip(self.cross_names, slot.cross)),
                 **dict(zip(self.past_names, slot.past))}
        return self.decoder.run(feeds, outputs=dict(zip(self.present_names, slot.past)))[0]

    def reorder_cache(self, cache: Seq2SeqCache, index: torch.Tensor, within_inputs: bool = False) -> Seq2SeqCache:
        return reordered(cache, index, lambda *shape: self._slot(*shape).reset(), within_inputs)

    def close(self) -> None:
        for graph in (self.encoder, self.cross_graph, self.decoder):
            graph.close()
        self._slots.close()
