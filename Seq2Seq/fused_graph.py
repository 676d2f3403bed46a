"""Pieces of the encoder-decoder graphs for ONNX Runtime built straight from the weights (`onnxrt --static-cache`
with a family's `Seq2SeqBuilder`): a family describes its encoder, its cross-attention projections and its
decoder step with these and `CausalLM.fused_graph`'s (norms, products, GELUs, the self-attention op), one
`GraphBuilder` per part, and returns the ModelProtos by part name.

The three graphs and their inputs and outputs (the steps bind them by these names):
- encoder: input_ids, attention_mask int64 [B, T] (an image encoder: pixel_values [B, 3, H, W] in the graph's
  float type) -> encoder_hidden_states [B, T, E] (the encoder's final output);
- cross: encoder_hidden_states [B, T, E] -> cross.<i>.key / cross.<i>.value [B, H, T, D] for every decoder layer,
  computed once per input into fixed buffers;
- decoder: input_ids, position_ids int64 [B, S] (decoder positions, the buffer's columns: decoder rows are never
  padded), seqlens_k int32 [B] (total length - 1), total_sequence_length int32 [] (host scalar: S for a prompt
  pass, the buffer length for a one-token step), encoder_attention_mask int64 [B, T], past.<i>.key/.value
  [B, H, L, D] (bound to the same memory as present.<i>.key/.value: written in place), cross.<i>.key/.value
  -> logits [B, S, V], present.<i>.key/.value.

Self-attention is `CausalLM.fused_graph.attention` (GroupQueryAttention writing the shared past/present buffer).
A model with an additive position bias (relative positions) still writes its keys and values with that op, whose
own output it discards (the op's CUDA kernel takes no bias), and attends with MultiHeadAttention over the whole
present buffer as 4-D key/value [B, H, L, D] with an attention bias [B, H, S, L] gathered from a table built at
build time (`relative_table`, `relative_bias`): the position bias of every (query, column) pair with a large negative
value on the columns after the query's position, so the columns not yet written are never read into the result.
Cross-attention is MultiHeadAttention over the cross buffers, the padded encoder columns excluded by an attention
bias from encoder_attention_mask (`padding_bias`). In a decoder graph of Linear ops whose builder declares
`own_attention` both are this project's Attention op instead: self-attention reads a model's position table
itself (its bias by clipped distance, no bias gathered per step) and writes the buffer, cross-attention reads the
cross buffers as a cache it does not write, the padded columns hidden by a key bias [B, T] (`cross_bias`,
`cross_attend`). Encoder self-attention is MultiHeadAttention over the three
projections with that bias (plus a position bias where the model has one).

(MultiHeadAttention with 4-D key/value [B, H, T, D] and attention_bias [B or 1, H or 1, S, T]: checked against a
numpy softmax on ONNX Runtime 1.31.1's CPU kernel; it is the form ONNX Runtime's own encoder-decoder graphs use on
CUDA.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import TensorProto

from CausalLM import fused_graph as fg
from CausalLM.fused_graph import MS, GraphBuilder, StateDict, constant

PARTS = ("encoder", "cross", "decoder")


@dataclass(frozen=True)
class Seq2SeqBuilder:
    """What a family's `BackendFacts.fused` names for onnxrt's encoder-decoder graphs: the HF model types it builds,
    a version in the artifact's fingerprint (bumped when a graph changes), `build(arch, weights, make_graph) ->
    {part: ModelProto}` (`arch`: the HF model on the meta device, read for its config and structure only;
    `weights`: a `StateDict`; `make_graph(part)`: a fresh `GraphBuilder` for that part), `refusal(config) -> str |
    None` (a one-line reason this model cannot be built) and the `parts` it builds: one without "encoder" leaves the
    encoder to the plain export, and its `build` passes the encoder's weight prefix to `check_all_used`."""

    model_types: tuple[str, ...]
    version: str
    build: Callable
    refusal: Callable
    parts: tuple[str, ...] = PARTS
    norms_in_products: bool = False  # the decoder graph's norms inside its Linear ops (fused_graph.GraphBuilder)
    own_attention: bool = False  # the decoder graph's self- and cross-attention this project's op (`cross_attend`)


def check_all_used(weights: StateDict, arch, skip: tuple[str, ...] = ()) -> None:
    """`weights.check_all_used()` with the tensors under the `skip` name prefixes (a part another graph builds) and
    every other name of a tied weight whose one name the graphs read counted as used: a tied tensor is one
    parameter of `arch` under several names (T5's `shared` and both stacks' `embed_tokens`)."""
    groups: dict[int, list[str]] = {}
    for name, param in arch.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    for names in groups.values():
        if any(weights.aliases.get(n, n) in weights.used for n in names):
            weights.used.update(n for n in names if n in weights.names)
    weights.used.update(n for n in weights.names if skip and n.startswith(skip))
    weights.check_all_used()


def encoder_io(g: GraphBuilder, dim: int) -> None:
    """The encoder graph's inputs (input_ids, attention_mask [B, T]) and output (encoder_hidden_states [B, T, E])."""
    g.input("input_ids", TensorProto.INT64, ["batch", "encoder_seq"])
    g.input("attention_mask", TensorProto.INT64, ["batch", "encoder_seq"])
    g.output("encoder_hidden_states", g.elem, ["batch", "encoder_seq", dim])


def cross_io(g: GraphBuilder, layers: int, heads: int, head_dim: int, dim: int) -> list[tuple[str, str]]:
    """The cross graph's input (encoder_hidden_states) and outputs; returns each decoder layer's (key, value) names."""
    g.input("encoder_hidden_states", g.elem, ["batch", "encoder_seq", dim])
    names = [(f"cross.{i}.key", f"cross.{i}.value") for i in range(layers)]
    for pair in names:
        for name in pair:
            g.output(name, g.elem, ["batch", heads, "encoder_seq", head_dim])
    return names


def decoder_io(g: GraphBuilder, layers: int, heads: int, head_dim: int, vocab: int):
    """The decoder step graph's inputs and outputs; returns (each layer's (past key, past value) names, each layer's
    (cross key, cross value) names). Present outputs are `present.<i>.key` / `.value`."""
    g.input("input_ids", TensorProto.INT64, ["batch", "seq"])
    g.input("position_ids", TensorProto.INT64, ["batch", "seq"])
    g.input("seqlens_k", TensorProto.INT32, ["batch"])
    g.input("total_sequence_length", TensorProto.INT32, [])
    g.input("encoder_attention_mask", TensorProto.INT64, ["batch", "encoder_seq"])
    g.output("logits", g.elem, ["batch", "seq", vocab])
    pasts, crosses = [], []
    for i in range(layers):
        for kv in ("key", "value"):
            g.input(f"past.{i}.{kv}", g.elem, ["batch", heads, "max_length", head_dim])
            g.output(f"present.{i}.{kv}", g.elem, ["batch", heads, "max_length", head_dim])
        pasts.append((f"past.{i}.key", f"past.{i}.value"))
    for i in range(layers):
        for kv in ("key", "value"):
            g.input(f"cross.{i}.{kv}", g.elem, ["batch", heads, "encoder_seq", head_dim])
        crosses.append((f"cross.{i}.key", f"cross.{i}.value"))
    return pasts, crosses


def masked(dtype) -> float:
    """The bias of a column no query may see: large and finite in the graph's float type (a row's sum with a
    position bias or a score stays finite, and a softmax over it is exactly 0 beside the real columns)."""
    return float(np.finfo(np.dtype(dtype)).min) / 2


def padding_columns(g: GraphBuilder, mask: str) -> str:
    """[B, T]: 0 on a real encoder column, `masked` on a padded one (`mask` int64 [B, T], 0 = padding)."""
    hidden = g.op("Cast", [g.op("Sub", [constant(g, 1), mask])], to=g.elem)  # [B, T]: 1 on padding
    return g.op("Mul", [hidden, constant(g, masked(g.dtype), g.dtype)])


def padding_bias(g: GraphBuilder, mask: str, queries: str) -> str:
    """The additive bias [B, 1, S, T] that hides the padded encoder columns (`mask` int64 [B, T], 0 = padding) from
    every query of `queries` ([B, S, ...]): 0 on a real column, `masked` on a padded one."""
    bias = g.op("Unsqueeze", [padding_columns(g, mask), constant(g, [1, 2])])  # [B, 1, 1, T]
    shape = g.op("Shape", [queries])
    rows, seq = g.op("Gather", [shape, constant(g, [0])]), g.op("Gather", [shape, constant(g, [1])])
    columns = g.op("Gather", [g.op("Shape", [mask]), constant(g, [1])])
    return g.op("Expand", [bias, g.op("Concat", [rows, constant(g, [1]), seq, columns], axis=0)])


def attend(g: GraphBuilder, q: str, k: str, v: str, heads: int, scale: float, bias: str | None) -> str:
    """MultiHeadAttention: queries [B, S, H * D] over keys/values [B, T, H * D] or [B, H, T, D], plus the additive
    `bias` [B or 1, H or 1, S, T] -> [B, S, H * D]."""
    inputs = [q, k, v, "", "", bias] if bias else [q, k, v]
    return g.op("MultiHeadAttention", inputs, [f"mha{g._count}"], domain=MS, num_heads=heads, scale=scale)


def cross_bias(g: GraphBuilder, crosses: list[tuple[str, str]], mask: str = "encoder_attention_mask",
               queries: str = "input_ids") -> str:
    """What hides the padded encoder columns from the decoder's cross-attention (`cross_attend`), made once a step:
    [B, T] for this project's Attention op (a graph that owns its attention), else the bias [B, 1, S, T]."""
    return padding_columns(g, mask) if fg.own_attention(g, crosses[0]) else padding_bias(g, mask, queries)


def cross_attend(g: GraphBuilder, q: str, cross: tuple[str, str], heads: int, scale: float, bias: str) -> str:
    """Queries [B, S, H * D] over a layer's cross buffers [B, H, T, D] with `cross_bias`'s bias -> [B, S, H * D]:
    this project's Attention op over the buffers as a cache it only reads (`causal=0`), where the graph owns its
    attention, else MultiHeadAttention."""
    if not fg.own_attention(g, cross):
        return attend(g, q, *cross, heads, scale, bias)
    return fg.attention_op(g, [q, "", "", *cross, "", "", bias], [f"cross{g._count}", "", ""], num_heads=heads,
                           scale=scale, causal=0)


def relative_table(values: np.ndarray, buckets: Callable, reach: int, causal: bool, dtype) -> np.ndarray:
    """The position bias by key-minus-query distance [2 * reach + 1, H] (row d + reach: distance d) from a model's
    bias rows by bucket (`values` [buckets, H]) and its bucketing (`buckets(distances) -> bucket per distance`).
    `reach` is a distance past which the bucket no longer changes (both ends of the table: checked), so clipping a
    distance to [-reach, reach] gives every distance's bias; `causal` puts `masked` on the keys after the query."""
    distances = np.arange(-reach, reach + 1)
    rows = np.asarray(buckets(distances))
    saturated = [rows[0] == buckets(np.array([-reach - 64]))[0], rows[-1] == buckets(np.array([reach + 64]))[0]]
    if not all(saturated):
        raise ValueError(f"the position buckets still change past distance {reach}")
    table = values[rows].astype(np.float32)
    if causal:
        table[distances > 0] += masked(dtype)
    return table


def relative_bias(g: GraphBuilder, table: str, reach: int, positions: str, columns: str) -> str:
    """The attention bias [B, H, S, L] (or [1, H, S, L] for [1, S] positions) of queries at `positions` int64 [B, S]
    over key columns `columns` int64 [L]: the table's row for each clipped distance (`relative_table`)."""
    distance = g.op("Sub", [g.op("Unsqueeze", [columns, constant(g, [0, 1])]),
                            g.op("Unsqueeze", [positions, constant(g, [2])])])  # [B, S, L]
    row = g.op("Add", [g.op("Clip", [distance, constant(g, -reach), constant(g, reach)]), constant(g, reach)])
    return g.op("Transpose", [g.op("Gather", [table, row])], perm=[0, 3, 1, 2])  # [B, S, L, H] -> [B, H, S, L]


def arange(g: GraphBuilder, of: str, axis: int) -> str:
    """0..n-1 int64 [n], n the size of `of`'s `axis`."""
    n = g.op("Squeeze", [g.op("Gather", [g.op("Shape", [of]), constant(g, [axis])]), constant(g, [0])])
    return g.op("Range", [constant(g, 0), n, constant(g, 1)])


def cross_projection(g: GraphBuilder, x: str, weight: str, bias: str | None, heads: int, head_dim: int,
                     out: str) -> str:
    """One cross-attention key or value [B, H, T, D] named `out`: x [B, T, E] @ weight (+ bias), heads first."""
    y = g.op("MatMul", [x, weight])
    y = g.op("Add", [y, bias]) if bias else y
    shaped = g.op("Reshape", [y, constant(g, [0, -1, heads, head_dim])])
    return g.op("Transpose", [shaped], [out], perm=[0, 2, 1, 3])


def gelu(g: GraphBuilder, x: str, tanh: bool) -> str:
    """GELU(x) without a bias: the tanh approximation (FastGelu) or the exact erf form (Gelu)."""
    return g.op("FastGelu" if tanh else "Gelu", [x], domain=MS)
