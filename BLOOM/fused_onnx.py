"""BLOOM's fused decode graph for `onnxrt --fused-decode` (HF model_type "bloom": BLOOM, BLOOMZ, bloom-offline),
built from the HF weights with the shared pieces of `CausalLM.fused_graph`:

    x = LayerNorm(word_embeddings[ids])                       (word_embeddings_layernorm) -> the residual stream
    h = LayerNorm(x)                                          (layer 0's input_layernorm)
    per layer: GroupQueryAttention(h @ qkv' + b' + alibi)     (ALiBi in widened heads, below; the cache in place)
               SkipLayerNorm(attn @ dense', residual, bias)   -> h2 (post_attention_layernorm), residual
               FastGelu(h2 @ dense_h_to_4h, bias) @ dense_4h_to_h     (bloom_gelu: the tanh approximation)
               SkipLayerNorm(mlp, residual, bias)             -> the next layer's input_layernorm (the last: ln_f)
    logits = ln_f @ word_embeddings^T                         (tied LM head: one [E, V] initializer)

ALiBi inside GroupQueryAttention, exactly. HF scores a query against key j as q.k / sqrt(D) + slope_h * j, j the
key's position (the mask's cumsum: for rows that start at column 0, as the fused steps run them, the column). The
op takes no attention bias on CUDA, so the bias goes into the heads: every head is widened from D to D' columns
(the next multiple of 16 with a column to spare), and in the spare column D
    the query carries c (a constant, in the packed product's bias, its weight column zero),
    the key carries slope_h * pos * sqrt(D) / c (pos: the token's position_ids; one [B, S, 3 H D'] tensor computed
    in fp32 once for all layers and cast once, so an fp16 graph rounds each bias once, as HF's fp16 alibi does),
    the value carries 0;
and the op's `scale` stays 1 / sqrt(D), so scale * (q'.k') = q.k / sqrt(D) + slope_h * pos. The cache holds the
widened keys (the bias written once, with the key), so ALiBi costs one Add per layer (and 4 nodes, 5 in fp16, for
the shared tensor). c = sqrt(D) rounded to the graph's float type keeps the key column near slope_h * pos (every
slope is below 1: no fp16 overflow below position 65504). The slope goes into the key rather than the query (whose
key column would then be the bare position) because fp16 holds positions exactly only up to 2048: this way every
position's bias is one rounding of its fp32 value. The value's spare columns come out as zeros and `dense`'s weight
has zero rows there, so the attention output [B, S, H D'] goes into the product as it is (no Slice). The cache is
[B, H, L, D'] (the graph's past inputs say so; the steps size their buffers from them). The packed product's rows
are reordered at build time: HF's query_key_value is laid out per head ([H, 3, D]), the op wants all queries, all
keys, all values.

apply_residual_connection_post_layernorm (False in every released checkpoint) only changes which skip-norm output
is the residual. The slopes are HF's own (`BLOOM.attention.alibi_slopes`). Every weight of the checkpoint must be
used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from CausalLM import fused_graph as fg

ALIGN = 16  # the widened head size is a multiple of this (the CUDA kernels' vector loads)


def refusal(config) -> str | None:
    """Why this BLOOM model has no fused graph here (None: it has one). Any head size builds: the heads are
    widened to a multiple of 16 anyway."""
    return None


def widened(head_dim: int) -> int:
    """The head size in the graph: the next multiple of `ALIGN` with at least one column to spare."""
    return (head_dim // ALIGN + 1) * ALIGN


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a BloomForCausalLM (`arch`: its config and structure) from the checkpoint's
    weights (`take`), into `g`."""
    config = arch.config
    heads, head_dim = config.n_head, config.hidden_size // config.n_head
    wide = widened(head_dim)
    post = config.apply_residual_connection_post_layernorm
    pasts = fg.decode_io(g, config.n_layer, heads, wide, config.vocab_size)
    eps = config.layer_norm_epsilon
    c = float(np.asarray(math.sqrt(head_dim), dtype=g.dtype))  # the queries' spare column
    alibi = _alibi(g, heads, head_dim, wide, c)  # [B, S, 3 H D']: each key's slope * position * sqrt(D) / c
    # [B, S, E]; the LM head's [E, V] initializer
    x, head = fg.embedding_and_head(g, take, arch, "transformer.word_embeddings.weight", "lm_head.weight")
    x = _layer_norm(g, take, x, "transformer.word_embeddings_layernorm", eps)
    h = _layer_norm(g, take, x, "transformer.h.0.input_layernorm", eps)
    residual = h if post else x
    for i in range(config.n_layer):
        layer = f"transformer.h.{i}"
        # [B, S, 3 H D']: queries, keys, values, each head widened, the keys' ALiBi column added (in the product
        # itself, or by an Add after it)
        inside = ALIBI_IN_PRODUCT and g.linear
        qkv = _qkv(g, take, h, f"{layer}.self_attention.query_key_value", heads, head_dim, wide, c,
                   alibi if inside else None)
        qkv = qkv if inside else g.op("Add", [qkv, alibi])
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads,
                            arch.transformer.h[i].self_attention.inv_norm_factor)  # [B, S, H D']
        dense, dense_bias = _dense(g, take, attn, f"{layer}.self_attention.dense", heads, head_dim, wide)
        h, total = fg.skip_layer_norm(g, dense, residual, *fg.norm_weights(g, take, f"{layer}.post_attention_layernorm"),
                                      dense_bias, eps)
        residual = h if post else total
        up, up_bias = fg.product(g, take, h, f"{layer}.mlp.dense_h_to_4h")
        inner = fg.gelu(g, up, up_bias, tanh=True)  # [B, S, 4E]
        down, down_bias = fg.product(g, take, inner, f"{layer}.mlp.dense_4h_to_h")
        after = f"transformer.h.{i + 1}.input_layernorm" if i + 1 < config.n_layer else "transformer.ln_f"
        h, total = fg.skip_layer_norm(g, down, residual, *fg.norm_weights(g, take, after), down_bias, eps)
        residual = h if post else total
    fg.logits(g, h, head)  # [B, S', V]
    take.check_all_used()
    return g.model("bloom_fused_decode")


# the ALiBi columns added inside the q/k/v product (the Linear op's addend) instead of by an Add after it: one
# kernel a layer less, 1.1% off BLOOM-7B1's step on an H100 (5.841 against 5.905 ms a token, docs/PERFORMANCE.md)
ALIBI_IN_PRODUCT = True


def slopes(heads: int) -> np.ndarray:
    """HF's ALiBi slope per head [H] (fp32)."""
    from BLOOM.attention import alibi_slopes

    return alibi_slopes(heads).numpy()


def _alibi(g: fg.GraphBuilder, heads: int, head_dim: int, wide: int, c: float) -> str:
    """[B, S, 3 H D']: zero but in each key head's spare column, slope_h * position * sqrt(D) / c, multiplied in
    fp32 and cast to the graph's type once."""
    column = np.zeros((3, heads, wide), dtype=np.float32)
    column[1, :, head_dim] = slopes(heads) * (math.sqrt(head_dim) / c)
    position = g.op("Cast", ["position_ids"], to=TensorProto.FLOAT)
    positions = g.op("Unsqueeze", [position, fg.constant(g, [-1])])  # [B, S, 1]
    alibi = g.op("Mul", [positions, g.weight("alibi_columns", column.reshape(-1), np.float32)])
    return alibi if g.elem == TensorProto.FLOAT else g.op("Cast", [alibi], to=g.elem)


def _qkv(g: fg.GraphBuilder, take: fg.StateDict, h: str, module: str, heads: int, head_dim: int, wide: int,
         c: float, alibi: str | None = None) -> str:
    """h @ W' + b' (+ alibi) [B, S, 3 H D']: HF's per-head [H, 3, D] rows reordered into all queries, all keys, all
    values, each head widened to D' with zero weight columns; the bias carries c in each query head's spare
    column."""
    weight = take(f"{module}.weight").reshape(heads, 3, head_dim, -1).transpose(1, 0, 2, 3)  # [3, H, D, E]
    bias = take(f"{module}.bias").reshape(heads, 3, head_dim).transpose(1, 0, 2)  # [3, H, D]
    pad = ((0, 0), (0, 0), (0, wide - head_dim))
    weight = np.pad(weight, pad + ((0, 0),)).reshape(3 * heads * wide, -1)  # [3 H D', E]
    bias = np.pad(bias, pad)
    bias[0, :, head_dim] = c
    return g.matmul(h, f"{module}.weight", weight, g.weight(f"{module}.bias", bias.reshape(-1)), addend=alibi)


def _dense(g: fg.GraphBuilder, take: fg.StateDict, attn: str, module: str, heads: int, head_dim: int,
           wide: int) -> tuple[str, str]:
    """(attn [B, S, H D'] @ W'^T (W' [E, H D']), the bias initializer): zero weight columns at each head's spare
    columns."""
    weight = take(f"{module}.weight").reshape(-1, heads, head_dim)  # [E, H, D]
    weight = np.pad(weight, ((0, 0), (0, 0), (0, wide - head_dim))).reshape(-1, heads * wide)
    y = g.matmul(attn, f"{module}.weight", weight)
    return y, g.weight(f"{module}.bias", take(f"{module}.bias"))


def _layer_norm(g: fg.GraphBuilder, take: fg.StateDict, x: str, module: str, eps: float) -> str:
    return fg.layer_norm(g, x, *fg.norm_weights(g, take, module), eps)


# bump the version when the graph changes
# norms inside the Linear op's products: BLOOM-7B1's fastest measured graph (80.8% of an H100's copy bandwidth with
# them and the ALiBi columns in the product; docs/PERFORMANCE.md); this project's Attention op: 5.825 against 5.923
# ms a token with GroupQueryAttention
BUILDER = fg.FusedBuilder(model_types=("bloom",), version="2", build=build, refusal=refusal,
                          norms_in_products=True, own_attention=True)
