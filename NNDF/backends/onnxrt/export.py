"""ONNX export shared by every kind: a kind's flat-tensor wrapper exported with torch.onnx (dynamo), fp32 islands as
the family's `ExportSpec` declares, readable names for symbolic dimensions, tied weights stored once, external
data for models over ~2 GB (`export_graph`); exported outputs checked against PyTorch (`LogitsCheck`).

Export uses `torch.onnx.export(dynamo=True)` (the TorchScript exporter fails on transformers' mask code). What a
kind exports (its graphs, their inputs and outputs, how they are validated) lives in the kind's package:
CausalLM/export.py, Seq2Seq/export.py, Encoder/export.py.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from NNDF.backends.onnxrt.quantize import QuantSpec
from NNDF.backends.onnxrt.precision import fp32_islands, unconditional_fp16_clamp
from NNDF.errors import ArtifactError

EXTERNAL_DATA_BYTES = 1_800_000_000  # protobuf's hard limit is 2 GiB per file


@dataclass(frozen=True)
class ExportSpec:
    """Family-declared export facts (the defaults suit GPT-2, OPT and BLOOM)."""

    opset: int = 18
    atol_fp32: float = 1e-3  # max |ONNX - PyTorch| on logits and cache, fp32
    atol_fp16: float = 5e-2  # fp16 (relative to the logits' scale, see `validate`)
    fp32_modules: tuple[str, ...] = ()  # submodule names kept fp32 in fp16 exports (see precision.py)
    fp16_clamp_always: bool = False  # export HF's data-dependent fp16 overflow clamp unconditionally (BART)
    # --quantize (onnxrt): what stays float; not part of the float export's fingerprint (repr=False)
    quantize: QuantSpec = field(default=QuantSpec(), repr=False)


def export_graph(model: torch.nn.Module, graph: torch.nn.Module, args: tuple, inputs: list[str], outputs: list[str],
                 dynamic_shapes, dim_names, path: Path, spec: ExportSpec) -> None:
    """torch.onnx (dynamo) export of `graph` (a flat-tensor wrapper around `model`) to `path`: fp32 islands as
    `spec` declares, symbolic dimensions renamed by `dim_names(tensor name) -> [label or None per dim]`, tied
    weights stored once, external data for models over ~2 GB."""
    _quiet_exporter()
    large = sum(p.numel() * p.element_size() for p in model.parameters()) > EXTERNAL_DATA_BYTES
    with torch.inference_mode(False), torch.no_grad(), fp32_islands(model, spec.fp32_modules), \
            unconditional_fp16_clamp(spec.fp16_clamp_always):
        try:
            program = torch.onnx.export(
                graph.eval(), args, dynamo=True, input_names=inputs, output_names=outputs, dynamic_shapes=dynamic_shapes,
                opset_version=spec.opset, verbose=False,
            )
        except Exception as exc:  # torch.export raises many types: the user gets its summary in one line, the
            # cause stays chained (`__cause__`) for a traceback under --verbose
            raise ArtifactError(f"ONNX export of {path.stem} failed: {_export_summary(exc)}") from exc
        _dedupe_initializers(program.model)  # while fp32 islands are still fp32 (weights are read lazily)
        proto = program.model_proto
    _name_dimensions(proto, dim_names)
    save_onnx(proto, path, large)


def _export_summary(exc: Exception) -> str:
    """The line of torch.onnx's long report that says what failed (its 'Exception summary')."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("## Exception summary") and i + 1 < len(lines):
            return lines[i + 1][:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _quiet_exporter() -> None:
    """torch.onnx logs a warning per optional torchvision op it cannot register; none of them matter here."""
    import torch.onnx._internal.exporter._registration  # noqa: F401 (creates the loggers)

    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.onnx"):
            logging.getLogger(name).setLevel(logging.ERROR)


def _name_dimensions(proto, dim_names) -> None:
    """Give the exporter's symbols (s0, s17, ...) names that say what they are (TensorRT profiles use them)."""
    for value in list(proto.graph.input) + list(proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        for dim, label in zip(dims, dim_names(value.name) or []):
            if label is not None and dim.HasField("dim_param"):
                dim.dim_param = label


def _dedupe_initializers(model) -> None:
    """Store each weight once. onnx_ir's `DeduplicateHashedInitializersPass` merges initializers of equal dtype,
    shape and bytes (hashed: no second copy of the weights is held) of any size up to 4 G elements, in the main
    graph and in each subgraph (within each graph, not across), except graph inputs and outputs. Ours covers the
    rest: its hash needs C-contiguous data (`_contiguous_constants`), and a tied weight whose second copy the
    exporter's constant folding pre-transposed is no duplicate to it (`_derive_transposed_copies`)."""
    from onnx_ir.passes.common import DeduplicateHashedInitializersPass

    _contiguous_constants(model)
    DeduplicateHashedInitializersPass()(model)
    _derive_transposed_copies(model)


def _contiguous_constants(model) -> None:
    """Constants the exporter folded may be strided views (a folded Transpose of a weight); onnx_ir 1.1's hashed
    pass hashes the raw buffer and rejects those. Copy them contiguous (they are small: the exporter folds only
    small constants)."""
    import onnx_ir as ir

    for graph in model.graphs():
        for value in graph.initializers.values():
            raw = getattr(value.const_value, "raw", None)
            if (isinstance(raw, np.ndarray) and not raw.flags.c_contiguous) or \
                    (isinstance(raw, torch.Tensor) and not raw.is_contiguous()):
                tensor = value.const_value
                value.const_value = ir.Tensor(np.ascontiguousarray(tensor.numpy()), dtype=tensor.dtype,
                                              name=value.name)


def _derive_transposed_copies(model) -> None:
    """A tied weight whose second copy the exporter's constant folding pre-transposed (a small model's tied
    embeddings, e.g. tests/test_onnx_export.py's) is not a duplicate to onnx_ir's pass: replace it with a Transpose
    of the kept copy (folded once at session start). 2-D initializers of at least 1024 elements, within each
    graph."""
    import onnx_ir as ir

    def key(array) -> tuple:
        return array.dtype.str, array.shape, hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()

    for graph in model.graphs():
        seen: dict[tuple, object] = {}
        for value in tuple(graph.initializers.values()):
            tensor = value.const_value
            if (tensor is None or len(tensor.shape) != 2 or tensor.size < 1024 or value.is_graph_input()
                    or value.is_graph_output()):
                continue
            array = tensor.numpy()
            source = seen.get(key(array.T))
            if source is None:
                seen.setdefault(key(array), value)
                continue
            node = ir.node("Transpose", [source], {"perm": [1, 0]}, name=f"{value.name}_from_{source.name}")
            output = node.outputs[0]
            output.dtype, output.shape = value.dtype, value.shape
            value.replace_all_uses_with(output)
            graph.initializers.pop(value.name)
            output.name = value.name
            if len(graph):
                graph.insert_before(graph.node(0), node)
            else:
                graph.append(node)


def save_onnx(proto, path: Path, large: bool) -> None:
    """Write a graph; `large`: its weights go to one external-data file beside it (`<name>.data`)."""
    import onnx

    if large:
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))


class LogitsCheck:
    """Exported logits against PyTorch's, case by case: fp32 within `spec.atol_fp32`, fp16 within `atol_fp16`
    times the logits' scale (max |logit|). `worst()` returns the largest difference, or raises once with every
    mismatch listed. `quantity` names what is compared in messages (an encoder's embeddings)."""

    def __init__(self, spec: ExportSpec, fp16: bool, quantity: str = "logits"):
        self.spec, self.fp16, self.quantity = spec, fp16, quantity
        self.errors: list[str] = []
        self.largest = 0.0

    def add(self, label: str, ref: torch.Tensor, got: torch.Tensor, real: torch.Tensor | None = None) -> None:
        ref, got = ref.float(), got.float().to(ref.device)
        tol = self.spec.atol_fp16 * float(ref.abs().max()) if self.fp16 else self.spec.atol_fp32
        gap = (ref - got).abs()
        diff = float((gap[real] if real is not None else gap).max())
        self.largest = max(self.largest, diff)
        if not np.isfinite(diff) or diff > tol:
            self.errors.append(f"{label}: {self.quantity} differ by {diff:.3g} (tolerance {tol:.3g})")

    def worst(self) -> float:
        if self.errors:
            raise ArtifactError("ONNX export does not match PyTorch: " + "; ".join(self.errors))
        return self.largest
