"""The LLAMA family's fused decode graph for `onnxrt --fused-decode` (HF model types llama, mistral, qwen2, qwen3,
phi3), built from the HF weights with the shared pieces of `CausalLM.fused_graph`:

    x = embed_tokens[ids]                                   -> the residual stream
    h = SimplifiedLayerNorm(x) (layer 0's input_layernorm)
    per layer: GroupQueryAttention(h @ [q; k; v] + bias)    (grouped-query, rotary and sliding window in the op;
                                                             the cache written in place; Qwen3: each query and
                                                             key head RMS-normed before it)
               SkipSimplifiedLayerNorm(attn @ o_proj, residual, bias) -> h2 (post_attention_layernorm), residual
               SiLU(h2 @ gate) * (h2 @ up), one product for both, then @ down_proj
               SkipSimplifiedLayerNorm(mlp, residual, bias) -> the next layer's input_layernorm (the last: norm)
    logits = norm @ lm_head^T                               (a head tied to embed_tokens: one [E, V] initializer)

Rotary positions: the op rotates queries and keys with cos / sin tables [positions, rotary_dim / 2]
computed at build time by HF's own rotary module (its inv_freq and attention_scaling, so llama3, linear and YaRN
scaling are HF's numbers); rope types that change the tables with the sequence length ("dynamic", Phi-3's
"longrope") are refused. The op takes each token's position from its row's length, so rows start at position 0
(padded batches are refused by the steps). What differs by model type comes from the checkpoint's names: Phi-3's
fused qkv_proj / gate_up_proj or the separate projections (concatenated here into one product each), Qwen2's
q/k/v biases, Llama's optional attention_bias / mlp_bias, tied or separate LM head; and from the config: Qwen3's
head norms (`q_norm`, `k_norm`), Mistral's and Phi-3's sliding window (all layers), Qwen2's and Qwen3's per layer
(`layer_types`). Every weight of the checkpoint must be
used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import numpy as np
import torch

from CausalLM import fused_graph as fg
from CausalLM.ort_fused import VALIDATION_CACHE
from LLAMA import attention
from LLAMA.config import FUSED_TYPES
from NNDF.errors import ArtifactError



def refusal(config) -> str | None:
    """Why this model has no fused graph here (None: it has one)."""
    rope = attention.rope_parameters(config)
    rope_type = attention.rope_type(config)
    if rope_type not in attention.FIXED_ROPE:
        return (f"onnxrt --fused-decode computes the rotary tables once, at build time; rope type {rope_type!r} "
                f"changes them with the sequence length (it takes {', '.join(attention.FIXED_ROPE)})")
    if config.hidden_act != "silu":
        return f"onnxrt --fused-decode gates the MLP with SiLU; this model's activation is {config.hidden_act!r}"
    head_dim = attention.head_dim(config)
    rotary_dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    if head_dim % 16 or (rotary_dim // 2) % 8 or rotary_dim % 2:
        return (f"onnxrt --fused-decode's attention op rotates heads whose size is a multiple of 16 over a rotary "
                f"width that is a multiple of 16; this model's are {head_dim} and {rotary_dim}")
    return None


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a Llama, Mistral, Qwen2, Qwen3 or Phi-3 causal LM (`arch`: its config and
    structure) from the checkpoint's weights (`take`), into `g`."""
    config, layers = arch.config, arch.model.layers
    heads, kv_heads, head_dim = config.num_attention_heads, config.num_key_value_heads, layers[0].self_attn.head_dim
    pasts = fg.decode_io(g, len(layers), kv_heads, head_dim, config.vocab_size)
    rotary = _rotary_tables(g, arch, head_dim)
    eps = config.rms_norm_eps
    # [B, S, E]; the LM head's initializer
    x, head = fg.embedding_and_head(g, take, arch, "model.embed_tokens.weight", "lm_head.weight")
    h = fg.rms_norm(g, x, _weight(g, take, "model.layers.0.input_layernorm.weight"), eps)
    residual = x
    for i, window in enumerate(attention.layer_windows(config)):
        layer = f"model.layers.{i}"
        # [B, S, (H + 2 KV) * D]: the query heads, then the key heads, then the value heads
        qkv = _linear(g, take, h, f"{layer}.self_attn", ("qkv_proj",), ("q_proj", "k_proj", "v_proj"))
        if attention.head_norms(config):
            qkv = _head_norms(g, take, qkv, f"{layer}.self_attn", heads, kv_heads, head_dim, eps)
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads,
                            layers[i].self_attn.scaling, kv_heads, rotary, window)  # [B, S, H D]
        out, out_bias = fg.product(g, take, attn, f"{layer}.self_attn.o_proj")
        norm = _weight(g, take, f"{layer}.post_attention_layernorm.weight")
        h, residual = fg.skip_rms_norm(g, out, residual, norm, out_bias, eps)
        inner = _gated_mlp(g, take, h, f"{layer}.mlp", config.intermediate_size)  # [B, S, I]
        down, down_bias = fg.product(g, take, inner, f"{layer}.mlp.down_proj")
        after = f"model.layers.{i + 1}.input_layernorm" if i + 1 < len(layers) else "model.norm"
        h, residual = fg.skip_rms_norm(g, down, residual, _weight(g, take, f"{after}.weight"), down_bias, eps)
    fg.logits(g, h, head)  # [B, S', V]
    take.check_all_used()
    return g.model(f"{config.model_type}_fused_decode")


def _rotary_tables(g: fg.GraphBuilder, arch, head_dim: int) -> tuple[str, str]:
    """cos / sin [positions, rotary_dim / 2] from HF's rotary module at every position (its `attention_scaling`
    included); HF's tables repeat those columns twice (rotate_half's two halves). The op wants a row for every
    column of the buffer (a one-token step passes the buffer length as the total length): the model's positions,
    and the build's validation buffer where that is longer. The module is made anew on the CPU (`arch` is on the
    meta device)."""
    with torch.device("cpu"):
        rotary = type(arch.model.rotary_emb)(arch.config)
    rows = max(arch.config.max_position_embeddings, VALIDATION_CACHE)
    positions = torch.arange(rows)[None]
    with torch.no_grad():
        cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = cos[0].float().cpu().numpy(), sin[0].float().cpu().numpy()  # [P, rotary_dim]
    half = cos.shape[-1] // 2
    if cos.shape[-1] > head_dim or not (np.array_equal(cos[:, :half], cos[:, half:])
                                        and np.array_equal(sin[:, :half], sin[:, half:])):
        raise ArtifactError("the LLAMA fused graph expects HF's rotary tables in the half-split form with at most "
                            f"head size ({head_dim}) columns; this model's have {cos.shape[-1]}")
    return g.weight("cos_cache", cos[:, :half]), g.weight("sin_cache", sin[:, :half])


def _head_norms(g: fg.GraphBuilder, take: fg.StateDict, qkv: str, module: str, heads: int, kv_heads: int,
                head_dim: int, eps: float) -> tuple[str, str, str]:
    """q, k, v apart from packed q/k/v [B, S, (H + 2 KV) * D], each query head and each key head RMS-normed over
    its D features (Qwen3's `q_norm`, `k_norm`: gains [D]), v as it is (the attention op takes them apart: no
    concatenation)."""
    sizes = fg.constant(g, [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
    q, k, v = g.op("Split", [qkv, sizes], 3, axis=-1)
    normed = []
    for x, count, name in ((q, heads, "q_norm"), (k, kv_heads, "k_norm")):
        per_head = g.op("Reshape", [x, fg.constant(g, [0, 0, count, head_dim])])  # [B, S, heads, D]
        per_head = fg.rms_norm(g, per_head, _weight(g, take, f"{module}.{name}.weight"), eps)
        normed.append(g.op("Reshape", [per_head, fg.constant(g, [0, 0, count * head_dim])]))
    return (*normed, v)



def _weight(g: fg.GraphBuilder, take: fg.StateDict, name: str) -> str:
    return g.weight(name, take(name))


def _linear(g: fg.GraphBuilder, take: fg.StateDict, x: str, module: str, packed: tuple[str, ...],
            parts: tuple[str, ...]) -> str:
    """x @ W^T (+ b) with W the checkpoint's packed projection (`module.<packed>`) or its `parts` stacked in order
    (nn.Linear's [out, in] weights: one product where HF runs several)."""
    names = [f"{module}.{p}" for p in (packed if f"{module}.{packed[0]}.weight" in take else parts)]
    weight = np.concatenate([take(f"{n}.weight") for n in names])  # [out, in]
    biases = [take.optional(f"{n}.bias") for n in names]
    fused = f"{module}.{packed[0]}"  # the initializers' names: the packed projection's
    if all(b is None for b in biases):
        return g.matmul(x, f"{fused}.weight", weight)
    if any(b is None for b in biases):
        raise ArtifactError(f"the LLAMA fused graph needs a bias on all of {', '.join(names)} or none")
    return g.matmul(x, f"{fused}.weight", weight, g.weight(f"{fused}.bias", np.concatenate(biases)))


def _gated_mlp(g: fg.GraphBuilder, take: fg.StateDict, x: str, module: str, inner: int) -> str:
    """SiLU(x @ gate^T) * (x @ up^T) [B, S, I] from Phi-3's packed gate_up_proj (gate rows first) or gate_proj and
    up_proj (`fg.gated`); projections with biases (`mlp_bias`) as one product, then the gate."""
    parts = ("gate_proj", "up_proj")
    if any(f"{module}.{p}.bias" in take for p in ("gate_up_proj", *parts)):
        return fg.split_gate(g, _linear(g, take, x, module, ("gate_up_proj",), parts), inner, "silu")
    if f"{module}.gate_up_proj.weight" in take:
        both = take(f"{module}.gate_up_proj.weight")
        gate, up = both[:inner], both[inner:]
    else:
        gate, up = (take(f"{module}.{p}.weight") for p in parts)
    return fg.gated(g, x, f"{module}.gate_up_proj.weight", gate, up, "silu")


# bump the version when the graph changes
BUILDER = fg.FusedBuilder(model_types=FUSED_TYPES, version="2", build=build, refusal=refusal)
