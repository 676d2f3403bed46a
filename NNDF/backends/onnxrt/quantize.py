"""Weight quantization of exported ONNX graphs for the onnxrt backend: int8 (dynamic) and int4 (weight-only blocks).

A quantization is a type (`Int8`, `Int4`; `QUANTIZATIONS` maps the `--quantize` spelling to it) with one method,
`apply(model, keep_float) -> model`, over a float graph that `prepare` has made uniform:

- `prepare`: HF's Conv1D layers (a transposed Linear) export as `Gemm`, and a tied LM head as
  `MatMul(x, Transpose(embedding))`; ONNX Runtime's quantizers take `MatMul` with a constant weight, so every
  `Gemm` with a constant weight becomes `MatMul` (+ `Add` of its bias) under the same node name, and a `Transpose`
  of a constant feeding a `MatMul` that will be quantized is folded into a transposed constant (the embedding
  itself stays float for its `Gather`).
- `Int8`: `onnxruntime.quantization.quantize_dynamic` on the `MatMul` weights (signed int8 weights, one scale per
  output channel; activations quantized per call). fp32 graphs only. Per channel: measured on all-MiniLM-L6-v2,
  least embedding cosine to the float graph 0.994 against 0.958 per tensor, at no measurable cost in speed. With
  `attention` (`--quant-attention`) also the packed q/k/v weights of ONNX Runtime's fused `Attention` (an
  optimized encoder graph's) into `QAttention`: faster on long inputs, less exact (docs/QUANTIZATION.md). With
  `blocks` (`--quant-int8-blocks`) instead 8-bit weight blocks through `MatMulNBits`, as int4's below with 8 bits
  and one scale a block: ONNX Runtime's one-row kernel for them is cheaper than the dynamic product's where a
  model is small enough that its step is overhead, its multi-row kernel slower (docs/QUANTIZATION.md).
- `Int4`: `matmul_nbits_quantizer` (RTN) to `MatMulNBits`: blocks of `block_size` weights along K with one scale
  (and, asymmetric, one zero point) each; `accuracy_level` 4 lets the CPU kernel compute in int8 (measured
  faster; the CUDA kernel ignores it).

What stays float is declared, never named here: `QuantSpec` (a family's `ExportSpec.quantize`) lists weight-name
patterns kept float and the quantizations that keep the LM head float; the head is found structurally (the
`MatMul` whose result reaches the graph's `logits` output through shape-only operators).
"""
from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from NNDF.errors import UsageError

EXTERNAL_DATA_BYTES = 1_800_000_000  # as the float export: protobuf's limit is 2 GiB per file
HEAD_OUTPUT = "logits"  # the graph output the LM (or classifier) head produces
_PASS_THROUGH = {"Reshape", "Add", "Transpose", "Cast", "Squeeze", "Unsqueeze", "Identity", "Flatten", "Slice"}
MS_DOMAIN = "com.microsoft"  # ONNX Runtime's contrib operators (its fused Attention)
ACCURACY_LEVEL = 4  # MatMulNBits on the CPU: int8 compute for the activations (measured: docs/PERFORMANCE.md)


@dataclass(frozen=True)
class QuantSpec:
    """Family-declared quantization facts (`ExportSpec.quantize`; the defaults suit every family here)."""

    float_weights: tuple[str, ...] = ()  # weight-name patterns (substrings) kept float in every quantized graph
    float_head: tuple[str, ...] = ()  # quantizations (`Quantization.name`) that keep the LM head float


@dataclass(frozen=True)
class Quantization(ABC):
    """One way to quantize a graph's weights; `settings()` goes into the artifact's fingerprint."""

    name: ClassVar[str]

    @classmethod
    def from_options(cls, options) -> "Quantization":
        """This quantization with the settings `options` (`ORTOptions`) give it."""
        return cls()

    @property
    def tag(self) -> str:
        """The artifact name's suffix: the kind and its settings."""
        return self.name

    @property
    def label(self) -> str:
        """The row's name after the backend's (`onnxrt-<label>`, also deploy's default model name): the kind, and
        what the user chose that makes another model of it (int8 with --quant-attention: `int8-attn`); settings
        that only tune it (int4's block size) stay in the artifact's name."""
        return self.name

    @abstractmethod
    def apply(self, model, keep_float: frozenset[str]):
        """The quantized graph (an `onnx.ModelProto`) of a `prepare`d float graph; `keep_float`: node names
        left float."""

    def refusal(self, precision: str, device: str) -> str | None:
        """Why this quantization cannot take a graph of `precision` run on `device` (None: it can)."""
        return None

    @abstractmethod
    def settings(self) -> dict:
        """What the artifact's fingerprint and validation record say about this quantization."""

    @abstractmethod
    def flags(self) -> tuple[str, ...]:
        """The command-line flags that make this quantization (a command printed for the user)."""


@dataclass(frozen=True)
class Int8(Quantization):
    """Dynamic int8: int8 weights per output channel, uint8 activations quantized at run time; or, with `blocks`,
    8-bit weight blocks (`MatMulNBits`, symmetric) whose activations the kernel quantizes per block."""

    name: ClassVar[str] = "int8"
    attention: bool = False  # also ONNX Runtime's fused Attention's packed q/k/v weights (QAttention)
    blocks: int | None = None  # weights per scale along K: 8-bit blocks instead of dynamic int8 per channel

    @classmethod
    def from_options(cls, options) -> "Int8":
        return cls(bool(getattr(options, "quant_attention", False)), getattr(options, "quant_int8_blocks", None))

    @property
    def tag(self) -> str:
        if self.blocks is not None:
            return f"{self.name}-b{self.blocks}"
        return f"{self.name}-attn" if self.attention else self.name

    @property
    def label(self) -> str:
        return self.tag

    def apply(self, model, keep_float: frozenset[str]):
        if self.blocks is not None:
            return _weight_blocks(model, keep_float, bits=8, block_size=self.blocks, symmetric=True)
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        operators = ["MatMul"]
        if self.attention:
            if not any(n.op_type == "Attention" and n.domain == MS_DOMAIN for n in model.graph.node):
                raise UsageError("--quant-attention quantizes ONNX Runtime's fused Attention, and this graph has "
                                 "none (the optimizer fuses an encoder's attention): leave --quant-attention out")
            operators.append("Attention")
        with _scratch() as folder, _quiet_preprocessing_advice():  # quantize_dynamic reads and writes files
            source, target = folder / "float.onnx", folder / "int8.onnx"
            save(model, source)
            quantize_dynamic(source, target, op_types_to_quantize=operators, weight_type=QuantType.QInt8,
                             per_channel=True, nodes_to_exclude=sorted(keep_float),
                             use_external_data_format=_large(model),
                             # DefaultTensorType: the type of tensors shape inference cannot type (the outputs of
                             # ONNX Runtime's own operators, e.g. a fused graph's SkipLayerNormalization)
                             extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT})
            return onnx.load(target)

    def refusal(self, precision: str, device: str) -> str | None:
        if device != "cpu":  # ONNX Runtime's dynamic-quantization kernels are CPU kernels: no silent CPU fallback
            return f"--quantize int8 runs on ONNX Runtime's CPU kernels, not {device}: use --quantize int4 there"
        if precision != "fp32":
            what = "in weight blocks" if self.blocks else "(dynamic: activations quantized from fp32)"
            return f"--quantize int8 {what} takes fp32 graphs, not {precision}; drop --fp16, or use --quantize int4"
        return None

    def flags(self) -> tuple[str, ...]:
        return (("--quantize", self.name) + (("--quant-attention",) if self.attention else ())
                + (("--quant-int8-blocks", str(self.blocks)) if self.blocks is not None else ()))

    def settings(self) -> dict:
        if self.blocks is not None:
            return {"kind": self.name, "weights": f"8-bit blocks of {self.blocks}, symmetric (MatMulNBits)",
                    "activations": "int8 per block", "algorithm": "RTN", "accuracy_level": ACCURACY_LEVEL}
        fused = {"attention": "packed q/k/v int8 (QAttention)"} if self.attention else {}
        return {"kind": self.name, "weights": "int8 per channel", "activations": "uint8 dynamic", **fused}


@dataclass(frozen=True)
class Int4(Quantization):
    """Weight-only int4 blocks (`MatMulNBits`, round to nearest)."""

    name: ClassVar[str] = "int4"
    block_size: int = 128  # weights per scale along K (ONNX Runtime's default; measured: docs/PERFORMANCE.md)
    symmetric: bool = False  # False: a scale and a zero point per block (as ONNX Runtime's default); True: a scale

    @classmethod
    def from_options(cls, options) -> "Int4":
        block = cls.block_size if options.quant_block_size is None else options.quant_block_size
        return cls(block, cls.symmetric if options.quant_symmetric is None else options.quant_symmetric)

    def apply(self, model, keep_float: frozenset[str]):
        return _weight_blocks(model, keep_float, bits=4, block_size=self.block_size, symmetric=self.symmetric)

    @property
    def tag(self) -> str:
        return f"{self.name}-b{self.block_size}-{'sym' if self.symmetric else 'asym'}"

    def flags(self) -> tuple[str, ...]:
        return ("--quantize", self.name, "--quant-block-size", str(self.block_size),
                "--quant-symmetric" if self.symmetric else "--no-quant-symmetric")

    def settings(self) -> dict:
        return {"kind": self.name, "block_size": self.block_size, "symmetric": self.symmetric, "algorithm": "RTN",
                "accuracy_level": ACCURACY_LEVEL}


QUANTIZATIONS: dict[str, type[Quantization]] = {q.name: q for q in (Int8, Int4)}


def _weight_blocks(model, keep_float: frozenset[str], bits: int, block_size: int, symmetric: bool):
    """`model`'s MatMul weights as `bits`-bit blocks of `block_size` along K (`matmul_nbits_quantizer`, round to
    nearest) in `MatMulNBits` nodes, `ACCURACY_LEVEL` for the CPU kernel; `keep_float` nodes left as they are."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric,
                                          accuracy_level=ACCURACY_LEVEL, bits=bits)
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=sorted(keep_float), algo_config=config)
    quantizer.process()
    return quantizer.model.model


class _PreprocessingAdvice(logging.Filter):
    """quantize_dynamic always advises (a root-logger warning) running its pre-processing (symbolic shape inference
    and graph optimisation, for static calibration); ONNX Runtime optimises the graph when the session loads it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Please consider to run pre-processing")


@contextmanager
def _quiet_preprocessing_advice():
    advice = _PreprocessingAdvice()
    logging.getLogger().addFilter(advice)
    try:
        yield
    finally:
        logging.getLogger().removeFilter(advice)


def _large(model) -> bool:
    return sum(t.ByteSize() for t in model.graph.initializer) > EXTERNAL_DATA_BYTES


class _scratch:
    """A temporary folder (removed afterwards) for libraries that only read and write files."""

    def __enter__(self) -> Path:
        import tempfile

        self._tmp = tempfile.TemporaryDirectory(prefix="quantize-")
        return Path(self._tmp.name)

    def __exit__(self, *exc):
        self._tmp.cleanup()
        return False


def save(model, path: Path) -> None:
    """Write a graph; weights go to `<name>.data` beside it when the file would pass protobuf's limit."""
    import onnx

    if _large(model):
        onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                  location=path.name + ".data")
    else:
        onnx.save(model, path)


def head_nodes(model) -> set[str]:
    """Names of the MatMul / Gemm nodes whose result reaches the `logits` output through shape-only operators."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found, todo, seen = set(), [o.name for o in model.graph.output if o.name == HEAD_OUTPUT], set()
    while todo:
        node = producer.get(todo.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in ("MatMul", "Gemm"):
            found.add(node.name)
        elif node.op_type in _PASS_THROUGH:
            todo.extend(node.input[:1] if node.op_type != "Add" else node.input)
    return found


def float_nodes(model, spec: QuantSpec, quantization: Quantization) -> frozenset[str]:
    """Nodes left float: the head where the family declares it for this quantization, and nodes whose weight
    name matches a declared pattern."""
    keep = head_nodes(model) if quantization.name in spec.float_head else set()
    weights = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if any(pattern in name for name in node.input if name in weights for pattern in spec.float_weights):
            keep.add(node.name)
    return frozenset(keep)


def prepare(model, keep_float: frozenset[str]):
    """`model` (changed in place and returned) with every constant-weight Gemm as MatMul (+ Add), and constant
    Transposes feeding a MatMul that will be quantized folded into transposed constants."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    nodes, folded = [], set()
    for node in graph.node:
        quantized = node.name not in keep_float
        if quantized and node.op_type == "MatMul" and _constant_transpose(producer.get(node.input[1]), weights):
            transpose = producer[node.input[1]]
            if transpose.output[0] not in folded:
                perm = helper.get_attribute_value(transpose.attribute[0])
                array = np.ascontiguousarray(np.transpose(numpy_helper.to_array(weights[transpose.input[0]]), perm))
                graph.initializer.append(numpy_helper.from_array(array, transpose.output[0]))
                folded.add(transpose.output[0])
        if quantized and node.op_type == "Gemm" and node.input[1] in weights and _plain_gemm(node):
            nodes.extend(_gemm_as_matmul(node, weights[node.input[1]]))
        else:
            nodes.append(node)
    nodes = [n for n in nodes if not (n.op_type == "Transpose" and n.output[0] in folded)]  # now a constant
    del graph.node[:]
    graph.node.extend(nodes)
    # The exporter annotates initializers in value_info too; a transB weight stored transposed above would keep
    # its old shape there and fail the quantizer's shape inference. Constants need no annotation: drop them all.
    annotations = [v for v in graph.value_info if v.name not in weights]
    del graph.value_info[:]
    graph.value_info.extend(annotations)
    return model


def _constant_transpose(node, weights) -> bool:
    return node is not None and node.op_type == "Transpose" and node.input[0] in weights


def _plain_gemm(node) -> bool:
    """A Gemm that is a plain x @ W (+ b): alpha = beta = 1, A not transposed."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return attrs.get("transA", 0) == 0 and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0


def _gemm_as_matmul(node, weight) -> list:
    """MatMul (same node name, so exclusions carry over) + Add of the bias; a transB weight is stored transposed."""
    from onnx import helper, numpy_helper

    if any(a.name == "transB" and a.i for a in node.attribute):
        weight.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(weight).T), weight.name))
    if len(node.input) < 3 or not node.input[2]:
        return [helper.make_node("MatMul", node.input[:2], node.output, name=node.name)]
    product = node.output[0] + "_matmul"
    return [helper.make_node("MatMul", node.input[:2], [product], name=node.name),
            helper.make_node("Add", [product, node.input[2]], node.output, name=node.name + "_bias")]


def row_gathers(model):
    """`model` (changed in place and returned) with each Gather of a constant's columns that transposes them into
    rows (axis 1 of [E, V], then Transpose perm [1, 2, 0] to [B, S, E]: the embedding of a tied head stored for
    MatMul, `fused_graph.embedding_and_head`) made a Gather of the rows of the constant stored transposed, where
    that Gather is the constant's only reader: once the head reads its own quantized weight, the table is the
    embedding's alone, and a token's row is contiguous instead of E reads V apart (llama-offline's 32-token prompt
    pass: the column gather took 70-80 us of ~1.2 ms)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {t.name: t for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    dropped = set()
    for node in graph.node:
        table = node.input[0] if node.op_type == "Gather" and node.input else None
        after = readers.get(node.output[0], []) if table else []
        if (table not in weights or len(readers[table]) != 1 or len(after) != 1 or after[0].op_type != "Transpose"
                or {a.name: helper.get_attribute_value(a) for a in node.attribute}.get("axis") != 1
                or list(helper.get_attribute_value(after[0].attribute[0])) != [1, 2, 0]):
            continue
        rows = np.ascontiguousarray(numpy_helper.to_array(weights[table]).T)
        weights[table].CopyFrom(numpy_helper.from_array(rows, table))
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("axis", 0))
        node.output[0] = after[0].output[0]
        dropped.add(after[0].output[0])
    nodes = [n for n in graph.node if not (n.op_type == "Transpose" and n.output[0] in dropped)]
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def float_weighted(model) -> dict[str, int]:
    """Nodes of `model` that still multiply by a float constant (through a Transpose or Cast of one), by operator:
    what quantization left float, found in the graph itself (e.g. plain int8 leaves ONNX Runtime's fused
    Attention's packed q/k/v weights float; a declared float LM head is a MatMul)."""
    from onnx import TensorProto

    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
    weights = {t.name: t.data_type for t in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    counts: dict[str, int] = {}
    for node in model.graph.node:
        weighted = node.op_type in ("MatMul", "Gemm") or (node.op_type == "Attention" and node.domain == MS_DOMAIN)
        name = node.input[1] if weighted and len(node.input) > 1 else None
        while name in producer and producer[name].op_type in ("Transpose", "Cast"):
            name = producer[name].input[0]
        if weights.get(name) in floats:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def quantize_file(source: Path, target: Path, quantization: Quantization, spec: QuantSpec) -> dict:
    """Quantize the float graph `source` into `target`; returns what was quantized and which nodes kept float
    weights (counted in the quantized graph)."""
    import onnx

    model = onnx.load(source)
    keep = float_nodes(model, spec, quantization)
    model = row_gathers(quantization.apply(prepare(model, keep), keep))
    save(model, target)
    ops = [node.op_type for node in model.graph.node]
    quantized = {op: ops.count(op) for op in ("MatMulNBits", "MatMulInteger", "DynamicQuantizeLinear", "QAttention")
                 if op in ops}
    return {"quantized_ops": quantized, "float_weighted": float_weighted(model)}


@dataclass(frozen=True)
class Agreement:
    """Quantized outputs against the float graph's on the same inputs ([N, V] rows)."""

    max_abs_diff: float
    top1_agreement: float | None  # share of rows with the same argmax (scores: logits, log-probabilities; None:
    #                               embeddings, whose largest coordinate means nothing)
    mean_cosine: float  # the cosine similarity of two rows, averaged (embeddings: what a search compares)
    min_cosine: float  # the least
    rows: int

    @classmethod
    def of(cls, reference, quantized, embeddings: bool = False) -> "Agreement":
        import torch

        reference, quantized = reference.double(), quantized.double()
        same = None if embeddings else float((reference.argmax(-1) == quantized.argmax(-1)).double().mean())
        cosine = torch.nn.functional.cosine_similarity(reference, quantized, dim=-1)  # [N]
        return cls(float((reference - quantized).abs().max()), same, float(cosine.mean()), float(cosine.min()),
                   int(reference.shape[0]))

    def record(self) -> dict:
        return {"max_abs_diff_vs_float": self.max_abs_diff, "top1_agreement_vs_float": self.top1_agreement,
                "mean_cosine_vs_float": self.mean_cosine, "min_cosine_vs_float": self.min_cosine,
                "rows_compared": self.rows}
