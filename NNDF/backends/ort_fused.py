"""`onnxrt --fused-decode`: the family's fused decode graph (`NNDF.backends.fused_graph`: ONNX Runtime's
GroupQueryAttention, SkipLayerNormalization, FastGelu) as a derived artifact, and the steps that drive it.

`FusedDecodeOnnx` is a `GraphArtifact` like the quantized graphs: built from the run's PyTorch model by the
builder the family's `ExportSpec.fused_decode` names ("module:attribute" of a `fused_graph.FusedBuilder`),
fingerprinted (config, weights, precision, builder version, onnx and
onnxruntime versions), validated against PyTorch at build time (`validation.json`) and cached as
`decoder-<precision>-fused/model.onnx` (+ `model.onnx.data`). The standard export stays what `trt` builds from.

`OrtFusedSteps` keeps one `KVSlot` per (rows, max_length) in a `SlotPool`: full-length key/value buffers bound as
both past and present (the attention op writes each step's keys and values in place), and the one-token step's
ids, positions, per-row lengths (`seqlens_k`, int32 on the device) and logits at fixed addresses, so ONNX Runtime's
CUDA graph captures that step once per slot and replays it. `total_sequence_length` is a host scalar (the CUDA
kernel takes it on the CPU) that a captured graph freezes: one-token steps always pass the buffer length, which
the kernel only uses to tell the step from a prompt pass and to size its split-K work; the per-row lengths come
from `seqlens_k`. The op reads no attention mask: prompts with padding are refused (one line), never run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from NNDF import registry
from NNDF.artifacts import digest, weights_identity
from NNDF.backends.onnx_artifact import GraphArtifact, user_files
from NNDF.backends.onnx_export import LogitsCheck
from NNDF.backends.ort_steps import OrtGraph
from NNDF.context import RunContext
from NNDF.errors import UsageError
from NNDF.slots import KVSlot, SlotPool, reordered, step_inputs

HOST_INPUTS = frozenset({"total_sequence_length"})  # inputs the attention kernel reads on the CPU
# validation's buffer length: a generation-sized buffer, so one-token steps pass the kernel the total length it
# sizes split-K decoding by in real runs (a 7-column buffer would take a different path), while 7 are written
VALIDATION_CACHE = 256
PADDED = ("onnxrt --fused-decode runs unpadded batches only: its attention op reads one length per row, not a "
          "mask, so a left-padded prompt would attend to its pad tokens; give prompts of one length (or "
          "--batch-size 1) or leave --fused-decode out")


def device_refusal(precision: str, device: str) -> str | None:
    """Why the fused graph cannot run at this precision on this device (None: it can)."""
    if device == "cuda" and precision == "fp32":
        return ("onnxrt --fused-decode on cuda needs --fp16: ONNX Runtime's GroupQueryAttention CUDA kernel is "
                "registered for float16 and bfloat16 only (its CPU kernel runs fp32)")
    return None


def fused_builder(spec):
    """The family's fused graph builder (`ExportSpec.fused_decode`), or None."""
    return registry.load(spec.fused_decode) if spec.fused_decode else None


def fused_artifact(base: GraphArtifact, run: RunContext) -> "FusedDecodeOnnx":
    """The fused graph for this run in place of `base` (the model type was checked: `Backend.check_fused_decode`),
    or UsageError naming why this model, precision or device has none."""
    builder = fused_builder(base.spec)
    why = builder.refusal(run.source.config) or device_refusal(run.options.precision, run.device.type)
    if why:
        raise UsageError(why)
    return FusedDecodeOnnx(base.spec, base.task, builder)


class FusedDecodeOnnx(GraphArtifact):
    """The family's fused decode graph, built from the run's PyTorch model."""

    prefix = "decoder"

    def __init__(self, spec, task, builder):
        super().__init__(spec, task)
        self.builder = builder
        self.record: dict | None = None

    def parts(self, use_cache: bool) -> tuple[str, ...]:
        return ("decoder",)

    def file_name(self, part: str) -> str:
        return "model.onnx"

    def artifact_name(self, run: RunContext) -> str:
        return f"{self.prefix}-{run.options.precision}-fused"

    def fingerprint(self, run: RunContext) -> dict:
        import onnx
        import onnxruntime

        return {"config": digest(run.source.config.to_dict()),
                "weights": weights_identity(run.source.local_dir, run.source.location),
                "fused": {"precision": run.options.precision, "device": run.device.type,
                          "builder": f"{self.spec.fused_decode}@{self.builder.version}"},
                "versions": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}}

    def user_paths(self, run: RunContext) -> dict[str, Path] | None:
        if user_files(run, "onnx", run.options):
            raise UsageError("--fused-decode builds its graph from the model's weights; leave --decoder-onnx out "
                             "(or --fused-decode, to run your file)")
        return None

    def building(self, run: RunContext) -> str:
        return f"building {run.source.variant}'s fused decode graph for ONNX Runtime"

    def read_validation(self, record: dict) -> None:
        self.record, self.max_diff = record, record["max_abs_diff_vs_pytorch"]

    def steps(self, run: RunContext, paths: dict[str, Path], cuda_graph: bool | None = None) -> "OrtFusedSteps":
        graph = run.options.use_cuda_graph if cuda_graph is None else cuda_graph
        return OrtFusedSteps(paths["decoder"], run.device, run.options.threads, graph)

    def build_into(self, model, run: RunContext, out_dir: Path) -> dict:
        from NNDF.backends import fused_graph

        proto = self.builder.build(model, np.float16 if run.options.fp16 else np.float32)
        fused_graph.save(proto, out_dir / "model.onnx")
        diff = validate_fused(model, self.steps(run, {"decoder": out_dir / "model.onnx"}, cuda_graph=False),
                              self.spec, run.options.fp16)
        return {"max_abs_diff_vs_pytorch": diff, "nodes": fused_graph.op_counts(proto)}

    def notes(self) -> tuple[str, ...]:
        nodes = (self.record or {}).get("nodes", {})
        return (f"fused decode graph: {sum(nodes.values())} nodes ({', '.join(f'{op} {n}' for op, n in nodes.items())})",)


def validate_fused(model, steps: "OrtFusedSteps", spec, fp16: bool) -> float:
    """The fused graph's logits against PyTorch's on an unpadded prompt pass (2 rows of 5 tokens) and two
    one-token steps (whose logits depend on every cached key and value) in a `VALIDATION_CACHE`-long buffer;
    the max abs difference, or
    ArtifactError listing every mismatch (`LogitsCheck`)."""
    from NNDF.backends.torch_steps import TorchSteps

    reference, check = TorchSteps(model, use_cache=True), LogitsCheck(spec, fp16)
    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0)).to(device)
    positions = torch.arange(7, device=device).expand(2, 7)
    caches = [reference.new_cache(2, 7), steps.new_cache(2, VALIDATION_CACHE)]
    try:
        for label, cols in (("prompt pass", slice(0, 5)), ("cached step", slice(5, 6)), ("cached step", slice(6, 7))):
            mask = torch.ones(2, cols.stop, dtype=torch.long, device=device)
            ref, caches[0] = reference.forward(ids[:, cols], mask, positions[:, cols], caches[0])
            got, caches[1] = steps.forward(ids[:, cols].to(steps.device), mask.to(steps.device),
                                           positions[:, cols].to(steps.device), caches[1])
            check.add(label, ref, got)
    finally:
        steps.close()
    return check.worst()


class OrtFusedSteps:
    """The decoder step contract over a fused decode graph (always a static, in-place cache)."""

    name = "onnxrt"
    use_cache = True

    def __init__(self, path: Path, device: torch.device, threads: int = 0, cuda_graph: bool = False):
        self.device, self.cuda_graph = device, cuda_graph
        self.graph = OrtGraph(path, device, threads, cuda_graph, HOST_INPUTS)
        self.past_names = [n for n in self.graph.inputs if n.startswith("past.")]
        self.present_names = [n for n in self.graph.output_names if n.startswith("present.")]
        self._slots: SlotPool[KVSlot] = SlotPool()

    def new_cache(self, batch: int, max_length: int) -> KVSlot:
        return self._slot(batch, max_length)

    def _slot(self, rows: int, max_length: int) -> KVSlot:
        return self._slots.get((rows, max_length), lambda number: self._new_slot(rows, max_length, number))

    def _new_slot(self, rows: int, max_length: int, graph_id: int) -> KVSlot:
        """Past buffers [rows, heads, max_length, head_dim] (bound as present too), and the one-token step's inputs
        and logits at fixed addresses (no mask: the op reads per-row lengths); its CUDA graph is `graph_id`."""
        device, graph = self.device, self.graph
        past = []
        for name in self.past_names:
            _, heads, _, head_dim = graph.inputs[name].shape
            past.append(torch.zeros(rows, heads, max_length, head_dim, dtype=graph.dtype(name), device=device))
        inputs = step_inputs(rows, max_length, device, mask=False)
        inputs["seqlens_k"] = torch.zeros(rows, dtype=torch.int32, device=device)  # total length - 1 per row
        # host memory, frozen by a captured graph
        inputs["total_sequence_length"] = torch.tensor(max_length, dtype=torch.int32)
        vocab = graph.outputs["logits"].shape[-1]
        logits = torch.empty(rows, 1, vocab, dtype=graph.dtype("logits"), device=device)
        return KVSlot(rows, max_length, past, inputs, logits, graph_id)

    def reorder_cache(self, cache: KVSlot, index: torch.Tensor) -> KVSlot:
        return reordered(cache, index, self._slot)

    def forward(self, input_ids, attention_mask, position_ids, cache: KVSlot, last_only=False):
        width, seq = attention_mask.shape[1], input_ids.shape[1]
        if seq > 1 or width == 1:
            return self._prompt(input_ids, attention_mask, position_ids, cache), cache
        cache.inputs["seqlens_k"].fill_(width - 1)
        cache.ids.copy_(input_ids)
        cache.positions.copy_(position_ids)
        if cache.binding is None:
            feeds = {**cache.inputs, **dict(zip(self.past_names, cache.past))}
            outputs = {"logits": cache.logits, **dict(zip(self.present_names, cache.past))}
            cache.binding = self.graph.bind(feeds, outputs)
        options = self.graph.run_options(cache.graph_id) if self.cuda_graph else None
        self.graph.run_bound(cache.binding, options)
        return cache.logits, cache

    def _prompt(self, input_ids, attention_mask, position_ids, slot: KVSlot) -> torch.Tensor:
        """The prompt pass: columns 0..S-1 of the buffers written, uncaptured."""
        seq = input_ids.shape[1]
        if attention_mask.shape[1] != seq:
            raise UsageError("onnxrt --fused-decode runs a prompt pass only on an empty cache (its attention op "
                             "takes a later multi-token pass for one row only); leave --fused-decode out")
        if not bool(attention_mask.all()):
            raise UsageError(PADDED)
        slot.inputs["seqlens_k"].fill_(seq - 1)
        feeds = {"input_ids": input_ids, "position_ids": position_ids, "seqlens_k": slot.inputs["seqlens_k"],
                 "total_sequence_length": torch.tensor(seq, dtype=torch.int32),
                 **dict(zip(self.past_names, slot.past))}
        return self.graph.run(feeds, outputs=dict(zip(self.present_names, slot.past)))[0]

    def close(self) -> None:
        self.graph.close()
        self._slots.close()
