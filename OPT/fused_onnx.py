"""OPT's fused decode graph for `onnxrt --fused-decode` (HF model_type "opt": every OPT size and opt-offline),
built from the HF weights with the shared pieces of `CausalLM.fused_graph`. Pre-norm layout (all sizes but 350m):

    x = embed_tokens[ids] (@ project_in) + embed_positions[positions + 2]
    h = SkipLayerNorm(tokens, positions)                   -> layer 0's self_attn_layer_norm, the residual stream
    per layer: GroupQueryAttention(h @ [q; k; v] + bias)    (the cache written in place)
               SkipLayerNorm(attn @ out_proj, residual, bias) -> h2 (final_layer_norm of the layer), residual
               ReLU(h2 @ fc1 + bias) @ fc2
               SkipLayerNorm(mlp, residual, bias)           -> the next layer's self_attn_layer_norm (the last: the
                                                               decoder's final_layer_norm; a plain add without one)
    logits = h (@ project_out) @ embed_tokens^T             (tied LM head, its own [E, V] initializer)

Post-norm layout (`do_layer_norm_before` False: opt-350m): every residual add is followed by its norm, whose output
is the next residual (x = LN(x + sublayer(x))): the same skip norms, shifted by one (the embedding sum has no norm;
after attention: self_attn_layer_norm; after the MLP: final_layer_norm; the decoder has no final norm).

Positions: HF gathers row position + 2 (OPTLearnedPositionalEmbedding's offset); the graph's `position_ids` are
0-based per row, so the table is stored from its row 2. Queries are scaled by head_dim ** -0.5 (HF scales the
query projection, the op its products). Token embeddings are not scaled. `project_in` / `project_out` (a word
embedding narrower than the hidden size) are products without bias; layer norms without affine parameters
(`layer_norm_elementwise_affine` False) get ones and zeros; biases are optional (`enable_bias`). Every weight of the
checkpoint must be used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import numpy as np

from CausalLM import fused_graph as fg

POSITION_OFFSET = 2  # OPTLearnedPositionalEmbedding: row p + 2 holds position p
ACTIVATIONS = ("relu",)


def refusal(config) -> str | None:
    """Why this OPT model has no fused graph here (None: it has one)."""
    if config.activation_function not in ACTIVATIONS:
        return (f"onnxrt --fused-decode runs OPT's MLP with ReLU; this model's activation is "
                f"{config.activation_function!r}")
    head_dim = config.hidden_size // config.num_attention_heads
    if head_dim % 8:
        return (f"onnxrt --fused-decode needs a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's is {head_dim}")
    return None


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of an OPTForCausalLM (`arch`: its config and structure) from the checkpoint's weights
    (`take`), into `g`."""
    config, decoder = arch.config, arch.model.decoder
    layers = decoder.layers
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    pasts = fg.decode_io(g, len(layers), heads, head_dim, config.vocab_size)
    post = not config.do_layer_norm_before
    norms = _norm_order(decoder, post)  # the norm after each residual add, in order
    eps = layers[0].self_attn_layer_norm.eps
    tokens, positions = _embeddings(g, take, decoder)  # [B, S, E] each
    h, residual = _add_norm(g, take, tokens, positions, norms[0], None, eps, post, config.hidden_size)
    for i in range(len(layers)):
        layer = f"model.decoder.layers.{i}"
        qkv = _qkv(g, take, h, f"{layer}.self_attn")  # [B, S, 3E]: q heads, then k heads, then v heads
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads,
                            layers[i].self_attn.scaling)  # [B, S, E]
        out, out_bias = fg.product(g, take, attn, f"{layer}.self_attn.out_proj")
        h, residual = _add_norm(g, take, out, residual, norms[2 * i + 1], out_bias, eps, post, config.hidden_size)
        inner = fg.projection(g, take, h, f"{layer}.fc1", relu=True)  # [B, S, F]
        down, down_bias = fg.product(g, take, inner, f"{layer}.fc2")  # [B, S, E]
        h, residual = _add_norm(g, take, down, residual, norms[2 * i + 2], down_bias, eps, post,
                                config.hidden_size)
    if decoder.project_out is not None:
        h, _ = fg.product(g, take, h, "model.decoder.project_out")  # [B, S, word_embed_proj_dim]
    # [B, S', V]; the head: embed_tokens', unless the checkpoint has its own
    fg.logits(g, h, g.stored("lm_head.weight", take("lm_head.weight")))
    take.check_all_used()
    return g.model("opt_fused_decode")


def _norm_order(decoder, post: bool) -> list[str | None]:
    """The norm module that follows each residual add: the embedding sum, then each layer's attention and MLP
    (pre-norm: the next sublayer's input norm, the last the decoder's final norm or None; post-norm: the norm of
    the sublayer just added, none after the embedding sum)."""
    names = [f"model.decoder.layers.{i}.{n}" for i in range(len(decoder.layers))
             for n in ("self_attn_layer_norm", "final_layer_norm")]
    if post:
        return [None] + names
    return names + ["model.decoder.final_layer_norm" if decoder.final_layer_norm is not None else None]


def _embeddings(g: fg.GraphBuilder, take: fg.StateDict, decoder) -> tuple[str, str]:
    """(token embeddings [B, S, E], projected in where the word embedding is narrower; position embeddings
    [B, S, E] of the 0-based `position_ids`)."""
    tokens = g.op("Gather", [g.weight("embed_tokens", take("model.decoder.embed_tokens.weight")), "input_ids"])
    if decoder.project_in is not None:
        tokens, _ = fg.product(g, take, tokens, "model.decoder.project_in")
    table = take("model.decoder.embed_positions.weight")[POSITION_OFFSET:]  # [max_positions, E]
    positions = g.op("Gather", [g.weight("embed_positions", table), "position_ids"])
    return tokens, positions


def _add_norm(g: fg.GraphBuilder, take: fg.StateDict, x: str, residual: str, norm: str | None, bias: str | None,
              eps: float, post: bool, width: int) -> tuple[str, str]:
    """(the next sublayer's input, the residual stream) after adding x (+ bias) to the residual and applying
    `norm` (one SkipLayerNormalization kernel); post-norm: the normed sum is the residual too."""
    if norm is None:
        total = g.op("Add", [x, residual])
        total = g.op("Add", [total, bias]) if bias else total
        return total, total
    gamma, beta = take.optional(f"{norm}.weight"), take.optional(f"{norm}.bias")
    gamma = g.weight(f"{norm}.weight", np.ones(width, np.float32) if gamma is None else gamma)
    beta = g.weight(f"{norm}.bias", np.zeros(width, np.float32) if beta is None else beta)
    normed, total = fg.skip_layer_norm(g, x, residual, gamma, beta, bias, eps)
    return normed, normed if post else total


def _qkv(g: fg.GraphBuilder, take: fg.StateDict, x: str, module: str) -> str:
    """x @ [q; k; v]^T (+ [q; k; v] biases): the three nn.Linear projections ([out, in] each) as one product."""
    names = [f"{module}.{p}_proj" for p in "qkv"]
    weight = np.concatenate([take(f"{n}.weight") for n in names])  # [3E, E]
    biases = [take.optional(f"{n}.bias") for n in names]
    bias = None if any(b is None for b in biases) else np.concatenate(biases)  # enable_bias False: none has one
    return g.matmul(x, f"{module}.qkv.weight", weight, None if bias is None else g.weight(f"{module}.qkv.bias", bias))


# bump the version when the graph changes; this project's Attention op: OPT-6.7B's step 5.062-5.066 against 5.189-5.191
# ms a token with GroupQueryAttention on an H100 (docs/PERFORMANCE.md)
BUILDER = fg.FusedBuilder(model_types=("opt",), version="2", build=build, refusal=refusal, own_attention=True)
