"""GPT-Neo's fused decode graph for `onnxrt --fused-decode` (HF model_type "gpt_neo": EleutherAI's GPT-Neo,
gpt-neo-offline), built from the HF weights with the shared pieces of `CausalLM.fused_graph`:

    x = SkipLayerNorm(wte[ids], wpe[positions])            -> h, the residual stream
    per layer: GroupQueryAttention(h @ [q; k; v])  (no biases, scale 1; a "local" layer's window in the op;
                                                    the cache written in place)
               SkipLayerNorm(attn @ out_proj, residual, bias) -> h2 (ln_2), residual
               FastGelu / BiasGelu(h2 @ c_fc, bias) @ mlp.c_proj
               SkipLayerNorm(mlp, residual, bias)           -> the next layer's ln_1 (the last: ln_f)
    logits = ln_f @ wte^T                                   (a tied LM head: one [E, V] initializer)

What differs from GPT-2: nn.Linear weights ([out, in], transposed here into MatMul operands), separate q/k/v
projections without biases (concatenated into one product), attention scores not scaled (GPT-Neo does not divide
by sqrt(head size): the op's scale is 1.0), and layers alternating "global" and "local" attention
(`config.attention_layers`). HF's local layer masks a query at column i to keys i - window_size + 1 .. i: its last
`window_size` keys, itself included, which is the op's `local_window_size`. (HF counts columns of its left-padded
buffer, the fused steps a row's own from column 0: the same keys, as leading pads only ever fall out of a window.)

fp16: HF computes GPT-Neo's unscaled scores in fp32 (it upcasts queries and keys). The op takes the fp16 queries
and keys (HF's, before that upcast) and its CUDA flash kernels accumulate the scores and the softmax in fp32; any
kernel that rounded the scores to fp16 would lose more here than for a scaled model (they are up to sqrt(head
size) times larger). Tested in fp32 on the CPU only.

Activations: those of GPT2/config.py's FUSED_GELUS (GPT-Neo's gelu_new: FastGelu); others are refused. Every
weight of the checkpoint must be used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import numpy as np

from CausalLM import fused_graph as fg
from GPT2.config import FUSED_GELUS


def refusal(config) -> str | None:
    """Why this GPT-Neo model has no fused graph here (None: it has one)."""
    if config.activation_function not in FUSED_GELUS:
        return (f"onnxrt --fused-decode has no fused op for activation {config.activation_function!r} "
                f"(it has {', '.join(FUSED_GELUS)})")
    if (config.hidden_size // config.num_heads) % 8:
        return (f"onnxrt --fused-decode needs a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's is {config.hidden_size // config.num_heads}")
    kinds = set(config.attention_layers) - {"global", "local"}
    if kinds:
        return f"onnxrt --fused-decode runs 'global' and 'local' attention layers; this model has {sorted(kinds)}"
    return None


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a GPTNeoForCausalLM (`arch`: its config and structure) from the checkpoint's
    weights (`take`), into `g`."""
    config = arch.config
    heads, head_dim = config.num_heads, config.hidden_size // config.num_heads
    pasts = fg.decode_io(g, config.num_layers, heads, head_dim, config.vocab_size)
    eps = config.layer_norm_epsilon
    # [B, S, E]; the LM head's initializer
    tokens, head = fg.embedding_and_head(g, take, arch, "transformer.wte.weight", "lm_head.weight")
    positions = g.op("Gather", [_weight(g, take, "transformer.wpe.weight"), "position_ids"])  # [B, S, E]
    h, residual = fg.skip_layer_norm(g, tokens, positions, *fg.norm_weights(g, take, "transformer.h.0.ln_1"), None, eps)
    tanh = FUSED_GELUS[config.activation_function] == "tanh"
    for i, kind in enumerate(config.attention_layers):
        layer = f"transformer.h.{i}"
        attn_module = f"{layer}.attn.attention"
        # [B, S, 3E]: the query heads, then the key heads, then the value heads
        qkv = np.concatenate([take(f"{attn_module}.{p}_proj.weight") for p in "qkv"])  # [3E, E]
        qkv = g.matmul(h, f"{attn_module}.qkv_proj.weight", qkv)
        window = config.window_size if kind == "local" else None
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads, 1.0,
                            window=window)  # [B, S, E]
        out, out_bias = fg.product(g, take, attn, f"{attn_module}.out_proj")
        h, residual = fg.skip_layer_norm(g, out, residual, *fg.norm_weights(g, take, f"{layer}.ln_2"), out_bias, eps)
        fc, fc_bias = fg.product(g, take, h, f"{layer}.mlp.c_fc")
        inner = fg.gelu(g, fc, fc_bias, tanh)  # [B, S, I]
        down, down_bias = fg.product(g, take, inner, f"{layer}.mlp.c_proj")
        after = f"transformer.h.{i + 1}.ln_1" if i + 1 < config.num_layers else "transformer.ln_f"
        h, residual = fg.skip_layer_norm(g, down, residual, *fg.norm_weights(g, take, after), down_bias, eps)
    fg.logits(g, h, head)  # [B, S', V]
    take.check_all_used()
    return g.model("gpt_neo_fused_decode")


def _weight(g: fg.GraphBuilder, take: fg.StateDict, name: str) -> str:
    return g.weight(name, take(name))


# bump the version when the graph changes
BUILDER = fg.FusedBuilder(model_types=("gpt_neo",), version="2", build=build, refusal=refusal)
