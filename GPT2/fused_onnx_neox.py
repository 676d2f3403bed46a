"""GPT-NeoX's fused decode graph for `onnxrt --fused-decode` (HF model_type "gpt_neox": GPT-NeoX-20B, Pythia,
gpt-neox-offline), built from the HF weights with the shared pieces of `CausalLM.fused_graph`:

    x = embed_in[ids]                                       -> the residual stream
    h = LayerNorm(x) (layer 0's input_layernorm)
    per layer: GroupQueryAttention(h @ [q; k; v] + bias)    (rotary in the op; the cache written in place)
      parallel residual (use_parallel_residual, x + attn(ln1(x)) + mlp(ln2(x))):
               h2 = LayerNorm(residual) (post_attention_layernorm: a second norm of the same x)
               Gelu(h2 @ dense_h_to_4h, bias) @ dense_4h_to_h
               SkipLayerNorm(attn @ dense + mlp, residual, both biases) -> the next input_layernorm, residual
      sequential:
               SkipLayerNorm(attn @ dense, residual, bias) -> h2 (post_attention_layernorm), residual
               SkipLayerNorm(Gelu(h2 @ dense_h_to_4h, bias) @ dense_4h_to_h, residual, bias) -> the next norm
    logits = final_layer_norm @ lm_head^T                   (embed_out in the checkpoint)

query_key_value's rows are laid out head by head ([H, 3, D]: each head's q, k and v); they are reordered at build
time into all the query heads, then the key heads, then the value heads. Rotary: the first rotary_pct of each
query and key head's columns turn in half-split pairs (j, j + rotary_dim / 2), with HF's own rotary module's tables
(made on the CPU; rope types whose tables change with the length are refused); where rotary_dim / 2 is not a
multiple of 8 (the CUDA kernel's: GPT-NeoX-20B's 24 of 96 columns), the query and key rows are permuted at build
time so the op turns a wider block whose extra pairs turn by 0 (`fused_graph.rotary_layout`). The op takes each
token's position from its row's length, so rows start at position 0. Every weight of the checkpoint must be used
(else the build fails naming the ones left over).
"""
from __future__ import annotations

import numpy as np
import torch

from CausalLM import fused_graph as fg
from CausalLM.ort_fused import VALIDATION_CACHE
from GPT2.config import FUSED_GELUS
from GPT2.fused_onnx_gptj import rotary_refusal

FIXED_ROPE = ("default", "linear", "llama3", "yarn")  # rope types whose tables do not change with the length


def _rope(config) -> dict:
    """The rope settings (transformers 5: `rope_parameters`; 4.x: `rope_scaling` and `rotary_pct`)."""
    rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    rope.setdefault("partial_rotary_factor", getattr(config, "rotary_pct", 0.25))
    return rope


def refusal(config) -> str | None:
    """Why this GPT-NeoX model has no fused graph here (None: it has one)."""
    if config.hidden_act not in FUSED_GELUS:
        return (f"onnxrt --fused-decode has no fused op for activation {config.hidden_act!r} "
                f"(it has {', '.join(FUSED_GELUS)})")
    rope = _rope(config)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in FIXED_ROPE:
        return (f"onnxrt --fused-decode computes the rotary tables once, at build time; rope type {rope_type!r} "
                f"changes them with the sequence length (it takes {', '.join(FIXED_ROPE)})")
    head_dim = config.hidden_size // config.num_attention_heads
    return rotary_refusal(head_dim, int(head_dim * rope["partial_rotary_factor"]))


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a GPTNeoXForCausalLM (`arch`: its config and structure) from the checkpoint's
    weights (`take`), into `g`."""
    config, layers = arch.config, arch.gpt_neox.layers
    attention = layers[0].attention
    heads, head_dim, eps = config.num_attention_heads, attention.head_size, config.layer_norm_eps
    pasts = fg.decode_io(g, len(layers), heads, head_dim, config.vocab_size)
    half = attention.rotary_ndims // 2
    order, width = fg.rotary_layout(head_dim, [(j, half + j) for j in range(half)])
    rotary = fg.rotary_tables(g, *_rotary_tables(arch, half), width)
    # [B, S, E]; the LM head's initializer
    x, head = fg.embedding_and_head(g, take, arch, "gpt_neox.embed_in.weight", "lm_head.weight")
    h = fg.layer_norm(g, x, *fg.norm_weights(g, take, "gpt_neox.layers.0.input_layernorm"), eps)
    residual = x
    for i in range(len(layers)):
        layer = f"gpt_neox.layers.{i}"
        qkv = _qkv(g, take, h, f"{layer}.attention.query_key_value", heads, order)  # [B, S, 3 H D]
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads,
                            attention.scaling, rotary=rotary)  # [B, S, E]
        after = f"gpt_neox.layers.{i + 1}.input_layernorm" if i + 1 < len(layers) else "gpt_neox.final_layer_norm"
        residual_add = _parallel if config.use_parallel_residual else _sequential
        h, residual = residual_add(g, take, attn, residual, layer, fg.norm_weights(g, take, after), config)
    fg.logits(g, h, head)  # [B, S', V]
    take.check_all_used()
    return g.model("gpt_neox_fused_decode")


def _parallel(g, take: fg.StateDict, attn: str, x: str, layer: str, after: tuple[str, str], config):
    """x + attn @ dense + mlp(post_attention_layernorm(x)) and its norm by `after` (the next layer's input norm):
    one Add of the branches, both biases in the skip norm's (a Linear-op graph: the adds in the two products, the
    norm in the products that read it)."""
    out = fg.projection(g, take, attn, f"{layer}.attention.dense", bias=False)
    out_bias = take.optional(f"{layer}.attention.dense.bias")
    h2 = fg.layer_norm(g, x, *fg.norm_weights(g, take, f"{layer}.post_attention_layernorm"), config.layer_norm_eps)
    mlp, mlp_bias = _mlp(g, take, h2, f"{layer}.mlp", config.hidden_act)
    bias = g.weight(f"{layer}.output.bias", mlp_bias if out_bias is None else mlp_bias + out_bias)
    if g.add_into_product(out, x):  # a Linear-op graph: x + out in the dense product, + mlp + bias in the MLP's
        if not g.add_into_product(mlp, out, bias):
            raise AssertionError("the MLP's Linear node takes the residual when the dense product did")
        return fg.layer_norm(g, mlp, *after, config.layer_norm_eps), mlp
    return fg.skip_layer_norm(g, g.op("Add", [out, mlp]), x, *after, bias, config.layer_norm_eps)


def _sequential(g, take: fg.StateDict, attn: str, x: str, layer: str, after: tuple[str, str], config):
    """x1 = x + attn @ dense, then x1 + mlp(post_attention_layernorm(x1)) and its norm by `after` (GPT-2's
    layout: each residual add in a skip norm)."""
    out = fg.projection(g, take, attn, f"{layer}.attention.dense", bias=False)
    out_bias = take.optional(f"{layer}.attention.dense.bias")
    out_bias = None if out_bias is None else g.weight(f"{layer}.attention.dense.bias", out_bias)
    h2, x1 = fg.skip_layer_norm(g, out, x, *fg.norm_weights(g, take, f"{layer}.post_attention_layernorm"), out_bias,
                                config.layer_norm_eps)
    mlp, mlp_bias = _mlp(g, take, h2, f"{layer}.mlp", config.hidden_act)
    bias = g.weight(f"{layer}.mlp.dense_4h_to_h.bias", mlp_bias)
    return fg.skip_layer_norm(g, mlp, x1, *after, bias, config.layer_norm_eps)


def _rotary_tables(arch, half: int) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [positions, rotary_dim / 2] from HF's rotary module (its attention scaling included; HF's tables
    repeat those columns twice, rotate_half's two halves), with a row for every column of the buffer: the model's
    positions, and the build's validation buffer where that is longer. Made anew on the CPU (`arch` is on the meta
    device)."""
    with torch.device("cpu"):
        rotary = type(arch.gpt_neox.rotary_emb)(arch.config)
    rows = max(arch.config.max_position_embeddings, VALIDATION_CACHE)
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1, dtype=torch.float32), torch.arange(rows)[None])
    cos, sin = cos[0].float().numpy(), sin[0].float().numpy()  # [P, rotary_dim]
    assert cos.shape[1] == 2 * half and np.array_equal(cos[:, :half], cos[:, half:]), "half-split tables expected"
    return cos[:, :half], sin[:, :half]


def _qkv(g: fg.GraphBuilder, take: fg.StateDict, h: str, module: str, heads: int, order: np.ndarray) -> str:
    """h @ W^T + b with query_key_value's rows ([H, 3, D] head by head) reordered into the query heads, the key
    heads, then the value heads ([3, H, D]), each query and key head's rows in the rotary `order`."""
    weight, bias = take(f"{module}.weight"), take.optional(f"{module}.bias")  # [3 H D, E], [3 H D]
    q, k, v = weight.reshape(heads, 3, -1, weight.shape[-1]).transpose(1, 0, 2, 3).reshape(3, -1, weight.shape[-1])
    weight = np.concatenate([fg.permute_heads(q, heads, order), fg.permute_heads(k, heads, order), v])
    if bias is not None:
        q, k, v = bias.reshape(heads, 3, -1).transpose(1, 0, 2).reshape(3, -1)
        bias = g.weight(f"{module}.bias", np.concatenate([fg.permute_heads(q, heads, order),
                                                          fg.permute_heads(k, heads, order), v]))
    return g.matmul(h, f"{module}.weight", weight, bias)


def _mlp(g: fg.GraphBuilder, take: fg.StateDict, h: str, module: str, act: str) -> tuple[str, np.ndarray]:
    """(Gelu(h @ dense_h_to_4h + bias) @ dense_4h_to_h, dense_4h_to_h's bias as an array: the skip norm adds it)."""
    inner = fg.projection(g, take, h, f"{module}.dense_h_to_4h", bias=False)  # [B, S, I]
    bias = g.weight(f"{module}.dense_h_to_4h.bias", take(f"{module}.dense_h_to_4h.bias"))
    inner = fg.gelu(g, inner, bias, FUSED_GELUS[act] == "tanh")
    out = fg.projection(g, take, inner, f"{module}.dense_4h_to_h", bias=False)
    return out, take(f"{module}.dense_4h_to_h.bias")


# bump the version when the graph changes
BUILDER = fg.FusedBuilder(model_types=("gpt_neox",), version="2", build=build, refusal=refusal)
