"""ONNX export of an encoder model (`Encoder.model.EncoderHead`: the HF encoder plus its head's pooling), its
validation against PyTorch, ONNX Runtime's transformer optimizer over it, and the check of a user's graph.

    input_ids, attention_mask[, token_type_ids]   int64 [batch, sequence]   (those the model's forward names)
    -> embeddings [batch, hidden]  |  logits [batch, labels]  |  logits [batch, sequence, labels] (per token)

The export (what TensorRT builds from, and what onnxrt runs with --no-ort-optimize) writes attention the way the
graph fusers of ONNX Runtime and TensorRT were written for:
- HF's eager attention (MatMul, scale, + mask, Softmax, MatMul) instead of SDPA, which torch.onnx decomposes
  with NaN guards (IsNaN, Where) that no fuser recognizes;
- the padding mask handed to HF as the additive [B, 1, T, T] mask transformers 4 built (`_expand_mask`: 0 where
  a token is kept, the dtype's minimum where it is padding; HF 5 takes a prepared 4-D mask as it is), instead of
  HF 5's own mask code (GatherND over index grids).
Validation compares the exported graph with the module the frameworks backend runs (SDPA, HF's own mask), on a
right-padded batch of real texts and on one text alone.

`optimize_for_ort` runs ONNX Runtime's `optimizer.optimize_model(model_type="bert")` (fused Attention,
SkipLayerNormalization on CUDA only (`CPU_UNFUSED`), BiasGelu, EmbedLayerNormalization where it matches) after two
exact rewrites of what the dynamo exporter writes differently from the TorchScript exporter the fuser's patterns
come from: the mask's `Unsqueeze(axes=[1, 2])` becomes two single-axis Unsqueezes (the attention fusion follows
them back to the 2-D mask), and `ReduceL2` (the L2 normalization of sentence embeddings) becomes
Sqrt(ReduceSum(x * x)) in fp32 (ONNX Runtime's symbolic shape inference has no rule for ReduceL2 with opset-18
axes inputs, and without shapes it skips every SkipLayerNormalization fusion).
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from Encoder.model import EncoderHead
from NNDF.backends.onnxrt.export import ExportSpec, LogitsCheck, export_graph, save_onnx
from NNDF.errors import ArtifactError
from NNDF.model_config import ModelDims

log = logging.getLogger(__name__)

# How the graph is written (part of the export fingerprint: a change re-exports cached graphs)
RECIPE = "eager attention, HF 4 additive [B,1,T,T] mask, dynamo"
# The rewrites `optimize_for_ort` makes before the optimizer (part of the optimized graph's fingerprint)
PREPARE = "mask Unsqueeze split per axis, ReduceL2 as fp32 Sqrt(ReduceSum(x * x))"
# The fusions `optimize_for_ort` leaves out for the CPU (part of the optimized graph's fingerprint): ONNX Runtime
# 1.31's CPU SkipLayerNormalization is slow (MiniLM's twelve took 9.5 of a 66.0 ms forward at 8 x 128, 2 threads;
# with Add and LayerNormalization in their place the forward ran 57.3 ms: docs/PERFORMANCE.md); the CPU sessions
# keep ONNX Runtime from fusing them again (`NNDF.backends.onnxrt.steps.CPU_SESSION`)
CPU_UNFUSED = ("skip_layer_norm",)
# Real texts of different lengths: the validation batch is right padded
VALIDATION_TEXTS = ("The weather is lovely today.", "He drove to the stadium.",
                    "A man is playing a guitar on a quiet street corner while people walk past him.")


class _ExpandedMask(torch.nn.Module):
    """The HF encoder, called with the additive attention mask transformers 4 built from the padding mask."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **inputs):
        dtype = self.model.dtype
        rows, length = attention_mask.shape
        expanded = attention_mask[:, None, None, :].expand(rows, 1, length, length).to(dtype)  # [B, 1, T, T]
        inverted = 1.0 - expanded  # 1 at padding
        additive = inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
        return self.model(input_ids=input_ids, attention_mask=additive, **inputs)


@contextmanager
def _eager_attention(model: torch.nn.Module):
    """HF's eager attention while exporting; the run's own implementation (SDPA) afterwards."""
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def _dim_names(head: EncoderHead):
    output = ["batch", "sequence", None] if head.head.per_token else ["batch", None]
    return lambda name: output if name == head.head.output else ["batch", "sequence"]


def _example(head: EncoderHead, names: tuple[str, ...]) -> tuple[torch.Tensor, ...]:
    """Random ids [2, 7] with row 1 right padded by 3 (sizes above 1: the exporter specialises 0 and 1)."""
    device = next(head.parameters()).device
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, ModelDims.of(head.model.config).vocab, (2, 7), generator=gen).to(device)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    values = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
    return tuple(values[name] for name in names)


def export_encoder(head: EncoderHead, out_dir: Path, spec: ExportSpec) -> Path:
    """Export `head` to `out_dir/encoder.onnx` (+ `.data` when large); returns the path."""
    names = head.input_names  # the task's: the tokenizer's inputs the model's forward takes
    graph = EncoderHead(_ExpandedMask(head.model), head.head, head.pooling, names).eval()
    auto = torch.export.Dim.AUTO
    dynamic = tuple({0: auto, 1: auto} for _ in names)  # forward(input_ids, attention_mask[, token_type_ids])
    path = out_dir / "encoder.onnx"
    with _eager_attention(head.model):
        export_graph(head.model, graph, _example(head, names), list(names), [head.head.output], dynamic,
                     _dim_names(head), path, spec)
    return path


def validate_encoder(head: EncoderHead, steps, batch: dict, alone: dict, spec: ExportSpec, fp16: bool) -> float:
    """Max |graph - PyTorch| of the head's output on a right-padded batch of texts and on one text alone (per
    token: at real tokens only); raises once, listing every mismatch, above the tolerance. `steps`: an
    `ForwardSteps` over the graph (closed here)."""
    check = LogitsCheck(spec, fp16, quantity=head.head.output)
    try:
        for label, inputs in (("padded batch of texts", batch), ("one text", alone)):
            with torch.inference_mode():
                ref = head(**inputs)  # [B, H] / [B, C] / [B, T, C]
            got = steps.forward(inputs)
            real = inputs["attention_mask"].bool() if head.head.per_token else None
            check.add(label, ref, got, real)
    finally:
        steps.close()
    return check.worst()


# --- ONNX Runtime's transformer optimizer ------------------------------------------------------------------

def optimize_for_ort(plain: Path, out: Path, dims: ModelDims, use_gpu: bool) -> dict[str, int]:
    """ONNX Runtime's BERT optimizer over the plain export, written to `out` (for the CPU without the fusions in
    `CPU_UNFUSED`); returns its fused-operator statistics (operator -> count, the non-zero ones). The intermediate
    file is removed."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    large = plain.with_name(plain.name + ".data").is_file()
    proto = onnx.load(str(plain))  # with its external data
    _prepare_for_ort(proto.graph)
    prepared = out.with_name("prepared.onnx")
    save_onnx(proto, prepared, large)
    ort.set_default_logger_severity(3)  # its sessions warn about every unused initializer otherwise
    try:
        options = FusionOptions("bert")
        for fusion in () if use_gpu else CPU_UNFUSED:
            setattr(options, f"enable_{fusion}", False)
        optimized = optimize_model(str(prepared), model_type="bert", num_heads=dims.heads, hidden_size=dims.hidden,
                                   use_gpu=use_gpu, optimization_options=options)
        optimized.save_model_to_file(str(out), use_external_data_format=large)
    except Exception as exc:  # the optimizer raises whatever its passes raise
        raise ArtifactError(f"ONNX Runtime's transformer optimizer failed on {plain} ({type(exc).__name__}: "
                            f"{str(exc).strip()[:160]}); --no-ort-optimize runs the plain export") from exc
    finally:
        for leftover in (prepared, prepared.with_name(prepared.name + ".data")):
            leftover.unlink(missing_ok=True)
    return {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}


def _prepare_for_ort(graph) -> None:
    """The two exact rewrites (module docstring): the padding mask's Unsqueezes one axis each, ReduceL2 as
    Sqrt(ReduceSum(x * x)) in fp32."""
    from onnx import numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.data_type == 7}  # int64
    floats = {o.name: o.type.tensor_type.elem_type for o in graph.output}
    nodes = []
    for node in graph.node:
        axes = constants.get(node.input[1]) if node.op_type == "Unsqueeze" and len(node.input) > 1 else None
        if axes is not None and axes.size > 1 and node.input[0] == "attention_mask":
            nodes += _one_axis_unsqueezes(graph, node, sorted(int(a) for a in axes.ravel()))
        elif node.op_type == "ReduceL2":
            nodes += _reduce_l2(node, next(iter(floats.values())))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _one_axis_unsqueezes(graph, node, axes: list[int]) -> list:
    from onnx import helper, numpy_helper

    made, source = [], node.input[0]
    for i, axis in enumerate(axes):
        name = f"{node.output[0]}_axis{axis}"
        graph.initializer.append(numpy_helper.from_array(np.array([axis], dtype=np.int64), f"{name}_axes"))
        target = node.output[0] if i == len(axes) - 1 else name
        made.append(helper.make_node("Unsqueeze", [source, f"{name}_axes"], [target], name=name))
        source = target
    return made


def _reduce_l2(node, float_type: int) -> list:
    """sqrt(sum(x * x)) over the same axes, squared and summed in fp32 (fp16 squares overflow above 256)."""
    from onnx import TensorProto, helper

    name = node.output[0]
    keep = [a for a in node.attribute if a.name in ("keepdims", "noop_with_empty_axes")]
    total = helper.make_node("ReduceSum", [f"{name}_squared", *node.input[1:]], [f"{name}_sum"], name=f"{name}_sum")
    total.attribute.extend(keep)
    return [helper.make_node("Cast", [node.input[0]], [f"{name}_fp32"], name=f"{name}_fp32", to=TensorProto.FLOAT),
            helper.make_node("Mul", [f"{name}_fp32", f"{name}_fp32"], [f"{name}_squared"], name=f"{name}_squared"),
            total,
            helper.make_node("Sqrt", [f"{name}_sum"], [f"{name}_root"], name=f"{name}_root"),
            helper.make_node("Cast", [f"{name}_root"], [name], name=f"{name}_cast", to=float_type)]


# --- the user's graph or engine ----------------------------------------------------------------------------

def encoder_mismatch(sig, run, noun: str = "graph") -> str | None:
    """The first way a graph or engine signature (`NNDF.integrity.Signature`) does not fit the run's model and
    head: a clause that follows '--encoder-onnx PATH ' (or '--encoder-engine PATH '), or None when it fits."""
    task, dims = run.family.task, run.source.dims
    head = task.head(run.source, run.options)
    model = f"{run.family.name} {run.source.variant}"
    out = sig.outputs.get(head.output)
    if out is None:
        return (f"is not an encoder {noun} for --task {head.name} as this harness exports it (no {head.output} "
                f"output; it has {', '.join(sig.outputs) or 'none'})")
    for name in ("input_ids", "attention_mask"):
        if name not in sig.inputs:
            return f"does not fit {model}: it has no input {name}"
    for name, tensor in sig.inputs.items():
        if name not in task.input_names(run):
            return f"does not fit {model}: it takes {name}, which {run.source.variant}'s tokenizer does not give"
        if tensor.dtype != "int64":
            return f"does not fit this harness: its input {name} is {tensor.dtype}, the inputs fed are int64"
    rank = 3 if head.per_token else 2
    width = dims.hidden if head.output == "embeddings" else len(task.labels(run.source)) or None
    if len(out.shape) != rank:
        return f"does not fit --task {head.name}: its {head.output} have {len(out.shape)} dimensions, not {rank}"
    if width and out.shape[-1] not in (None, width):
        what = "hidden size" if head.output == "embeddings" else "labels"
        return f"does not fit {model}: its {head.output} have {out.shape[-1]} entries ({what}), {model} has {width}"
    want = "float16" if run.options.fp16 else "float32"
    if out.dtype != want:
        change = "drop" if run.options.fp16 else "add"
        return f"does not fit this run: its {head.output} are {out.dtype}, this run is {want} ({change} --fp16)"
    return None
