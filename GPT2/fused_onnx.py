"""GPT-2's fused decode graph for `onnxrt --fused-decode` (HF model_type "gpt2": GPT-2, Cerebras-GPT,
gpt2-offline), built from the HF weights with the shared pieces of `CausalLM.fused_graph`:

    x = SkipLayerNorm(wte[ids], wpe[positions])            -> h, the residual stream
    per layer: GroupQueryAttention(h @ c_attn + b)  (the cache written in place)
               SkipLayerNorm(attn @ c_proj, residual, bias) -> h2 (ln_2), residual
               FastGelu / BiasGelu(h2 @ c_fc, bias) @ mlp.c_proj
               SkipLayerNorm(mlp, residual, bias)           -> the next layer's ln_1 (the last: ln_f)
    logits = ln_f @ wte^T                                   (tied LM head)

HF's Conv1D keeps weights as [in, out], so they are MatMul operands as stored. Every weight of the checkpoint
must be used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import math

from GPT2.config import FUSED_GELUS
from CausalLM import fused_graph as fg


def refusal(config) -> str | None:
    """Why this GPT-2 model has no fused graph here (None: it has one)."""
    if config.activation_function not in FUSED_GELUS:
        return (f"onnxrt --fused-decode has no fused op for activation {config.activation_function!r} "
                f"(it has {', '.join(FUSED_GELUS)})")
    if (config.n_embd // config.n_head) % 8:
        return (f"onnxrt --fused-decode needs a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's is {config.n_embd // config.n_head}")
    return None


def build(arch, weights: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a GPT2LMHeadModel (`arch`: its config and structure) from `weights`, into `g`."""
    config = arch.config
    take = _Pairs(weights)
    heads, head_dim = config.n_head, config.n_embd // config.n_head
    pasts = fg.decode_io(g, config.n_layer, heads, head_dim, config.vocab_size)
    eps = config.layer_norm_epsilon
    tokens = g.op("Gather", [g.weight("wte", take("transformer.wte.weight")), "input_ids"])  # [B, S, E]
    positions = g.op("Gather", [g.weight("wpe", take("transformer.wpe.weight")), "position_ids"])  # [B, S, E]
    h, residual = fg.skip_layer_norm(g, tokens, positions, *take.pair(g, "h.0.ln_1"), None, eps)
    for i in range(config.n_layer):
        scale = 1 / math.sqrt(head_dim) if config.scale_attn_weights else 1.0
        scale /= (i + 1) if config.scale_attn_by_inverse_layer_idx else 1
        qkv = fg.linear(g, h, *take.pair(g, f"h.{i}.attn.c_attn"))  # [B, S, 3E]: q, k, v, each head by head
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads, scale)  # [B, S, E]
        proj, proj_bias = take.pair(g, f"h.{i}.attn.c_proj")
        h, residual = fg.skip_layer_norm(g, fg.linear(g, attn, proj), residual, *take.pair(g, f"h.{i}.ln_2"),
                                         proj_bias, eps)
        fc, fc_bias = take.pair(g, f"h.{i}.mlp.c_fc")
        mlp, mlp_bias = take.pair(g, f"h.{i}.mlp.c_proj")
        inner = fg.gelu(g, fg.linear(g, h, fc), fc_bias, FUSED_GELUS[config.activation_function] == "tanh")  # [B, S, 4E]
        after = f"h.{i + 1}.ln_1" if i + 1 < config.n_layer else "ln_f"
        h, residual = fg.skip_layer_norm(g, fg.linear(g, inner, mlp), residual, *take.pair(g, after), mlp_bias, eps)
    head = take("lm_head.weight").T  # [E, V]: wte's, unless the checkpoint has its own head
    g.op("MatMul", [g.positions_from(h, fg.LOGITS_START), g.weight("lm_head", head)], ["logits"])  # [B, S', V]
    take.weights.check_all_used()
    return g.model("gpt2_fused_decode")


class _Pairs:
    """The checkpoint's weights by name (`fg.StateDict`: every weight must be used), with GPT-2's module pairs."""

    def __init__(self, weights: fg.StateDict):
        self.weights = weights

    def __call__(self, name: str):
        return self.weights(name)

    def pair(self, g, module: str) -> tuple[str, str]:
        """transformer.<module>'s weight and bias as initializers (a Conv1D's [in, out] weight: a MatMul operand
        as stored; or a LayerNorm's gamma and beta)."""
        name = f"transformer.{module}"
        return g.weight(name + ".weight", self(name + ".weight")), g.weight(name + ".bias", self(name + ".bias"))


BUILDER = fg.FusedBuilder(model_types=("gpt2",), version="2", build=build, refusal=refusal)  # bump the version when the graph changes
