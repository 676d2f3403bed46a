"""Pieces of a fused decode graph for ONNX Runtime, written with `onnx.helper`: a family describes its decoder
layer by layer with these (embeddings, skip layer norms or RMSNorms, one attention op per layer, biased GELU or
SwiGLU, matmuls; the checkpoint's weights by name through `StateDict`) and `GraphBuilder.model` returns the
ModelProto. The ops are ONNX Runtime's fused contrib ops (domain com.microsoft),
so the graph runs on ONNX Runtime only (TensorRT does not parse them).

Attention is `GroupQueryAttention` (ORT contrib op; with as many key/value heads as query heads it is plain
multi-head attention), or in a Linear-op graph whose builder declares `own_attention` (or with OWN_ATTENTION) this
project's Attention op (NNDF/backends/onnxrt/custom_ops.py) wherever no rotary is applied: the same inputs,
cache and per-row lengths, no host scalar. Why GroupQueryAttention and how the graph drives it (ONNX Runtime 1.31
sources, onnxruntime/contrib_ops/{cpu,cuda}/bert/group_query_attention*):
- inputs: packed QKV [B, S, 3*H*D] (key and value left out), past_key / past_value [B, H, L, D] (BNSH),
  seqlens_k int32 [B] (= total length - 1 per row, on the device), total_sequence_length int32 scalar (the batch's
  largest total length; the CUDA kernel registers it as a CPU input, `OrtMemTypeCPUInput`); outputs: the attention
  output [B, S, H*D], present_key / present_value.
- past and present share one buffer when they are bound to the same memory (the kernel compares the pointers):
  the new keys and values are written in place at column seqlens_k - S + 1 of the full-length buffer, and a
  one-token step attends to columns 0..seqlens_k. Rows are right-aligned at column 0: the op reads no mask, so
  a left-padded prompt would attend to its pad tokens (its `attention_bias` input is refused by the CUDA kernel).
- a prompt pass is recognised by S == total_sequence_length, a one-token step by S == 1. The per-row lengths come
  from seqlens_k on the device, but the host scalar must be at least every row's length: on CUDA (1.31.1, H100) a
  one-token step without a window runs cuDNN's flash attention over at most that many columns (a smaller value
  changed the logits), while a windowed one (ORT's own flash-decoding kernel) and the CPU kernel gave the same
  logits with any value (tools/bench/ort_gqa_probe.py). A captured CUDA graph freezes the host scalar: one-token
  steps always pass the buffer length L.
- kernels: CUDA float16 and bfloat16 only (no float32 on CUDA); CPU float32 and float16. head size a multiple of 8.
- grouped heads and rotary (the LLAMA family): packed QKV [B, S, (H + 2 KV) * D]; with `do_rotary` the op rotates
  queries and keys from `cos_cache` / `sin_cache` [rows, rotary width / 2] (head size a multiple of 16, the
  width's half a multiple of 8, at least total_sequence_length rows: a one-token step's buffer length) at
  positions it derives from seqlens_k, so rows start at position 0; `local_window_size` W: a query sees its last
  W keys, itself included (measured against HF's sliding window on the CPU kernel of ONNX Runtime 1.31.1).

The head reads the final norm's output from position `logits_start` on (an int64 [1] host input, a Slice's start:
0 for every position, -1 for the last only: `logits`), so a generation's prompt pass computes the head's product
at its last position only; logits [B, logits_seq, V].
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# the graph builder's names, which the families' builders read from here (fg.GraphBuilder, fg.MS, ...)
from CausalLM.graph_builder import (ELEM, GATED, IR_VERSION, LAYER_NORM, MS, OPSET, RMS_NORM,  # noqa: F401
                                    GraphBuilder, PendingNorm)
from CausalLM.graph_weights import StateDict, checkpoint_files  # noqa: F401 (the builders' names)
from CausalLM.graph_io import LOGITS_START
from NNDF.backends.onnxrt import custom_ops
from NNDF.errors import ArtifactError

# With the Linear op, a norm can run inside the products that read it and each residual add inside the product
# before it, so neither has a kernel of its own (GraphBuilder.norm, add_into_product). Each family's builder declares
# whether its graphs do (`norms_in_products`, as measured: docs/PERFORMANCE.md); True / False here: every family's
# (benchmarks' variants); None: each as declared.
NORMS_IN_PRODUCTS: bool | None = None
# Likewise whether a Linear-op graph's attention (without rotary) is this project's Attention op rather than
# GroupQueryAttention (`own_attention`, as measured: docs/PERFORMANCE.md); True / False here: every family's.
OWN_ATTENTION: bool | None = None
OWN_ATTENTION_MAX_HEAD_SIZE = 256  # the Attention op's CUDA kernel takes multiples of 8 up to this


@dataclass(frozen=True)
class FusedBuilder:
    """What a family's `BackendFacts.fused` names for onnxrt: the HF model types it builds (`model_types`), how to build
    the graph (`build(arch, weights, g) -> ModelProto`: `arch` is the HF model on the meta device, read for its
    config and module attributes, never its tensors; `weights` a `StateDict`; `g` the `GraphBuilder` to fill),
    which of those models it still cannot build (`refusal(config) -> str | None`, a one-line reason), and a version
    in the artifact's fingerprint (bumped when the graph changes)."""

    model_types: tuple[str, ...]
    version: str
    build: Callable
    refusal: Callable
    norms_in_products: bool = False  # with the Linear op: its norms inside its products (GraphBuilder)
    own_attention: bool = False  # with the Linear op: its attention this project's op (`attention`)


def owns_attention(declared: bool) -> bool:
    """Whether graphs whose builder declares `own_attention` run this project's Attention op (OWN_ATTENTION)."""
    return declared if OWN_ATTENTION is None else OWN_ATTENTION


def folds_norms(declared: bool) -> bool:
    """Whether a Linear-op graph of a family that declares `declared` runs its norms inside its products."""
    return declared if NORMS_IN_PRODUCTS is None else NORMS_IN_PRODUCTS


def product(g: GraphBuilder, take: StateDict, x: str, name: str) -> tuple[str, str | None]:
    """(x @ W^T, the bias initializer or None) for the checkpoint's nn.Linear `name` ([out, in] weight): the bias
    goes into the next fused op's kernel (a skip norm's or a GELU's)."""
    bias = take.optional(f"{name}.bias")
    return projection(g, take, x, name, bias=False), None if bias is None else g.weight(f"{name}.bias", bias)


def projection(g: GraphBuilder, take: StateDict, x: str, name: str, bias: bool = True, relu: bool = False) -> str:
    """x @ W^T (+ b where the checkpoint's nn.Linear `name` has one and `bias`; then ReLU) in the product itself."""
    b = take.optional(f"{name}.bias") if bias else None
    return g.matmul(x, f"{name}.weight", take(f"{name}.weight"), None if b is None else g.weight(f"{name}.bias", b),
                    relu=relu)


def norm_weights(g: GraphBuilder, take: StateDict, module: str) -> tuple[str, str]:
    """A LayerNorm's gamma and beta (the checkpoint's `module.weight`, `module.bias`) as initializers."""
    return tuple(g.weight(f"{module}.{p}", take(f"{module}.{p}")) for p in ("weight", "bias"))


def embedding_and_head(g: GraphBuilder, take: StateDict, arch, embed: str, head: str) -> tuple[str, str]:
    """(the token embeddings [B, S, E], the LM head as an initializer `stored` for `g.apply`) from the checkpoint's
    `embed` and `head` weights ([V, E] each). A head tied to the embedding is stored once, as the head: the
    embedding gathers its rows (the Linear op's [V, E]) or its columns (MatMul's [E, V], transposed to [B, S, E])."""
    table, lm = take(embed), take(head)
    if arch.get_output_embeddings().weight is not arch.get_input_embeddings().weight:
        return g.op("Gather", [g.weight(embed, table), "input_ids"]), g.stored(head, lm)
    tied = g.stored(head, lm)
    if g.linear:
        return g.op("Gather", [tied, "input_ids"]), tied
    return g.op("Transpose", [g.op("Gather", [tied, "input_ids"], axis=1)], perm=[1, 2, 0]), tied


def linear(g: GraphBuilder, x: str, weight: str, bias: str | None = None) -> str:
    """x @ weight (+ bias): weight [in, out]."""
    y = g.op("MatMul", [x, weight])
    return g.op("Add", [y, bias]) if bias else y


def skip_layer_norm(g: GraphBuilder, x: str, skip: str, gamma: str, beta: str, bias: str | None, eps: float):
    """(LayerNorm(x + skip + bias), x + skip + bias): the residual add and the next norm in one kernel, or (a
    Linear-op graph) the add in x's product and the norm in the products that read it."""
    if g.add_into_product(x, skip, bias):
        return g.norm(LAYER_NORM, x, gamma, beta, eps), x
    inputs = [x, skip, gamma, beta] + ([bias] if bias else [])
    normed, total = g.op("SkipLayerNormalization", inputs, [f"sln{g._count}", "", "", f"res{g._count}"],
                         domain=MS, epsilon=eps)[0::3]
    return normed, total


def attention(g: GraphBuilder, qkv: str | tuple[str, str, str], past: tuple[str, str], present: tuple[str, str],
              heads: int, scale: float, kv_heads: int | None = None, rotary: tuple[str, str] | None = None,
              window: int | None = None, bias: str | None = None) -> str:
    """Attention over packed QKV [B, S, (heads + 2 kv_heads) * D] (or q, k and v apart: [B, S, heads * D],
    [B, S, kv_heads * D] twice) with the cache written into `past` (bound as `present` too). `kv_heads` (default:
    `heads`) key/value heads, each shared by heads / kv_heads query heads. `rotary`: the (cos, sin) tables
    [positions, rotary_dim / 2] the op rotates the first rotary_dim columns of every query and key head with (the
    half-split form, not interleaved), at the position each token's row length gives (seqlens_k: the past length,
    then one per token), so the rows must start at position 0. `window`: each query sees only its last `window`
    keys, itself included (HF's sliding window; the op's local_window_size counts the same keys in ONNX Runtime
    1.31: measured against HF, tests/test_llama_fused_ort.py). `bias` (this project's op only): a position bias
    by key column minus query column [2R + 1, heads], the distance clipped to [-R, R].

    GroupQueryAttention, or in a graph with `own_attention` (no rotary, a head size its CUDA kernel takes) this
    project's Attention op (NNDF/backends/onnxrt/ops/ops.cc: the same inputs and cache, two kernels a step)."""
    names = [f"attn{g._count}", *present]
    attrs = dict(num_heads=heads, kv_num_heads=kv_heads or heads, scale=scale)
    inputs = [*(qkv if isinstance(qkv, tuple) else (qkv, "", "")), *past, "seqlens_k"]
    own = own_attention(g, past, rotary)
    if bias and not own:
        raise ArtifactError("a position bias in the attention needs this project's Attention op")
    if own:
        if window:
            attrs["local_window_size"] = window
        return attention_op(g, [*inputs, bias] if bias else inputs, names, **attrs)
    inputs.append("total_sequence_length")
    if rotary:
        inputs += list(rotary)
        attrs.update(do_rotary=1, rotary_interleaved=0)
    if window:
        attrs["local_window_size"] = window
    return g.op("GroupQueryAttention", inputs, names, domain=MS, **attrs)[0]


def attention_op(g: GraphBuilder, inputs: list[str], outputs: list[str], **attrs) -> str:
    """This project's Attention node (NNDF/backends/onnxrt/custom_ops.py) with `inputs` and `outputs` (Y and the
    presents; "" for none), its workspace output named after Y; returns Y."""
    return g.op("Attention", inputs, [*outputs, f"{outputs[0]}.workspace"], domain=custom_ops.DOMAIN, **attrs)[0]


def own_attention(g: GraphBuilder, past: tuple[str, str], rotary=None) -> bool:
    """Whether `attention` over the cache `past` is this project's op in this graph."""
    head_dim = g.input_shape(past[0])[-1]
    return g.own_attention and rotary is None and head_dim % 8 == 0 and head_dim <= OWN_ATTENTION_MAX_HEAD_SIZE


def rotary_layout(head_dim: int, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
    """(a permutation of a head's columns, the rotary width) giving a model's rotated column pairs the op's form:
    pair j (turned by the tables' column j) at columns (j, j + width / 2), the width's half the next multiple of 8
    (the CUDA kernel's), the slots past the pairs filled with columns the model does not rotate (their tables'
    columns: cos 1, sin 0, an identity turn), then the other unrotated columns. Applying one permutation to every
    query and key head (the projection's rows at build time) leaves each q.k, so the attention, unchanged:
    interleaved pairs (2j, 2j + 1) and a rotary part of 12 pairs (24 of a head's 96 columns, widened to 16 pairs)
    both run as the op's half-split form."""
    half = -(-len(pairs) // 8) * 8
    if 2 * half > head_dim or head_dim % 16:
        raise ArtifactError(f"the attention op rotates over a width that is a multiple of 16 in a head whose size is "
                            f"a multiple of 16; {len(pairs)} rotated pairs do not fit a head of {head_dim}")
    rotated = {c for pair in pairs for c in pair}
    rest = [c for c in range(head_dim) if c not in rotated]
    fill, rest = rest[:2 * (half - len(pairs))], rest[2 * (half - len(pairs)):]
    first = [a for a, _ in pairs] + fill[:half - len(pairs)]
    second = [b for _, b in pairs] + fill[half - len(pairs):]
    return np.array(first + second + rest), 2 * half


def rotary_tables(g: GraphBuilder, cos: np.ndarray, sin: np.ndarray, width: int) -> tuple[str, str]:
    """The op's cos / sin caches [positions, width / 2] from a model's [positions, pairs] (pair j's turn at every
    position), the slots past the pairs an identity turn (`rotary_layout`)."""
    pad = ((0, 0), (0, width // 2 - cos.shape[1]))
    return (g.weight("cos_cache", np.pad(cos, pad, constant_values=1.0)),
            g.weight("sin_cache", np.pad(sin, pad, constant_values=0.0)))


def permute_heads(array: np.ndarray, heads: int, order: np.ndarray) -> np.ndarray:
    """A projection's rows (weight [heads * D, in] or bias [heads * D]) with each head's D rows in `order`."""
    shape = array.shape
    return array.reshape(heads, len(order), *shape[1:])[:, order].reshape(shape)


def layer_norm(g: GraphBuilder, x: str, gamma: str, beta: str, eps: float) -> str:
    """LayerNorm(x) * gamma + beta over the last axis (`GraphBuilder.norm`)."""
    return g.norm(LAYER_NORM, x, gamma, beta, eps)


def rms_norm(g: GraphBuilder, x: str, gamma: str, eps: float) -> str:
    """RMSNorm(x) * gamma over the last axis (no mean subtracted, no beta): SimplifiedLayerNormalization
    (`GraphBuilder.norm`)."""
    return g.norm(RMS_NORM, x, gamma, None, eps)


def skip_rms_norm(g: GraphBuilder, x: str, skip: str, gamma: str, bias: str | None, eps: float):
    """(RMSNorm(x + skip + bias) * gamma, x + skip + bias): the residual add and the next RMSNorm in one kernel, or
    (a Linear-op graph) the add in x's product and the norm in the products that read it."""
    if g.add_into_product(x, skip, bias):
        return g.norm(RMS_NORM, x, gamma, None, eps), x
    inputs = [x, skip, gamma] + ([bias] if bias else [])
    normed, total = g.op("SkipSimplifiedLayerNormalization", inputs, [f"srms{g._count}", "", "", f"res{g._count}"],
                         domain=MS, epsilon=eps)[0::3]
    return normed, total


def constant(g: GraphBuilder, values, dtype=np.int64) -> str:
    """A small Constant node (shape inference reads its values; initializers go to the external data file)."""
    return g.op("Constant", [], value=numpy_helper.from_array(np.array(values, dtype=dtype)))


def gated(g: GraphBuilder, x: str, name: str, gate: np.ndarray, up: np.ndarray, activation: str) -> str:
    """act(x @ gate^T) * (x @ up^T) [B, S, I] for nn.Linear weights `gate`, `up` ([I, E] each); act "silu",
    "gelu_tanh", "gelu" (erf) or "relu". A Linear-op graph: one op whose weight rows are gate and up pairs
    (initializer `name`; GATED's activations), so the gate needs no kernel of its own; else one product of [gate;
    up], a Split, the activation and a Mul."""
    if g.linear and activation in GATED:
        pairs = np.stack([np.asarray(gate), np.asarray(up)], axis=1).reshape(-1, gate.shape[1])  # [2I, E]
        return g.apply(x, g.weight(name, pairs), gate=activation)
    both = g.matmul(x, name, np.concatenate([gate, up]))  # [B, S, 2I]
    return split_gate(g, both, gate.shape[0], activation)


def split_gate(g: GraphBuilder, gate_up: str, inner: int, activation: str) -> str:
    """act(gate) * up from one product [B, S, 2 * inner] holding gate then up: a Split, the activation ("silu",
    "relu", "gelu_tanh" or "gelu") and a Mul."""
    gate, up = g.op("Split", [gate_up, constant(g, [inner, inner])], 2, axis=-1)
    if activation == "silu":
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
    elif activation == "relu":
        act = g.op("Relu", [gate])
    else:
        act = g.op("FastGelu" if activation == "gelu_tanh" else "Gelu", [gate], domain=MS)
    return g.op("Mul", [act, up])


def gelu(g: GraphBuilder, x: str, bias: str, tanh: bool) -> str:
    """GELU(x + bias): the tanh approximation (FastGelu) or the exact erf form (BiasGelu)."""
    return g.op("FastGelu" if tanh else "BiasGelu", [x, bias], domain=MS)


def decode_io(g: GraphBuilder, layers: int, heads: int, head_dim: int, vocab: int) -> list[tuple[str, str]]:
    """The fused decode graph's inputs and outputs; returns each layer's (past key, past value) names, whose
    present outputs are `present.<i>.key` / `.value`. The logits [B, logits_seq, V] are those of the positions from
    `LOGITS_START` on (`logits`)."""
    g.input("input_ids", TensorProto.INT64, ["batch", "seq"])
    g.input("position_ids", TensorProto.INT64, ["batch", "seq"])
    g.input("seqlens_k", TensorProto.INT32, ["batch"])
    g.input("total_sequence_length", TensorProto.INT32, [])
    g.input(LOGITS_START, TensorProto.INT64, [1])
    g.output("logits", g.elem, ["batch", "logits_seq", vocab])
    cache = ["batch", heads, "max_length", head_dim]
    pasts = []
    for i in range(layers):
        for kv in ("key", "value"):
            g.input(f"past.{i}.{kv}", g.elem, cache)
            g.output(f"present.{i}.{kv}", g.elem, cache)
        pasts.append((f"past.{i}.key", f"past.{i}.value"))
    return pasts


def logits(g: GraphBuilder, h: str, head: str, bias: str | None = None) -> str:
    """The graph's `logits` output: h [B, S, E] (after the final norm, which may still be pending) from position
    `LOGITS_START` on, times the head `stored` as `head` (+ bias). A generation's prompt pass reads the last
    position's only (-1): the head's product over the prompt's other positions, for a large vocabulary a good part
    of the pass, is not computed; every position (0) for a one-token step and for scoring a text."""
    return g.apply(g.positions_from(h, LOGITS_START), head, bias, outputs=["logits"])


def save(model: onnx.ModelProto, path) -> None:
    """Write the graph to `path`. A graph whose weights a `GraphBuilder` already wrote to its data file (in the same
    folder) is written as it is; otherwise its weights go to `<name>.data` beside it."""
    if any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer):
        onnx.save_model(model, str(path))
        return
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=0)


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
