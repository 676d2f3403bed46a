"""GPT-2's fused decode graph for `onnxrt --fused-decode` (HF model_type "gpt2": GPT-2, Cerebras-GPT,
gpt2-offline), built from the HF weights with the shared pieces of `NNDF.backends.fused_graph`:

    x = SkipLayerNorm(wte[ids], wpe[positions])            -> h, the residual stream
    per layer: GroupQueryAttention(h @ c_attn + b)  (the cache written in place)
               SkipLayerNorm(attn @ c_proj, residual, bias) -> h2 (ln_2), residual
               FastGelu / BiasGelu(h2 @ c_fc, bias) @ mlp.c_proj
               SkipLayerNorm(mlp, residual, bias)           -> the next layer's ln_1 (the last: ln_f)
    logits = ln_f @ wte^T                                   (tied LM head)

HF's Conv1D keeps weights as [in, out], so they are MatMul operands as stored.
"""
from __future__ import annotations

import math

import numpy as np

from NNDF.backends import fused_graph as fg

GELU_TANH = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast"}  # the tanh approximation (FastGelu)


def refusal(config) -> str | None:
    """Why this GPT-2 model has no fused graph here (None: it has one)."""
    if config.activation_function not in GELU_TANH | {"gelu"}:
        return (f"onnxrt --fused-decode has no fused op for activation {config.activation_function!r} "
                f"(it has {', '.join(sorted(GELU_TANH | {'gelu'}))})")
    if (config.n_embd // config.n_head) % 8:
        return (f"onnxrt --fused-decode needs a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's is {config.n_embd // config.n_head}")
    return None


def build(model, dtype) -> "fg.onnx.ModelProto":
    """The fused decode graph of a GPT2LMHeadModel, weights in `dtype` (np.float32 or np.float16)."""
    config = model.config
    weights = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    w = lambda name: weights[f"transformer.{name}"]  # noqa: E731 - a short accessor
    g = fg.GraphBuilder(dtype)
    heads, head_dim = config.n_head, config.n_embd // config.n_head
    pasts = fg.decode_io(g, config.n_layer, heads, head_dim, config.vocab_size)
    eps, tanh = config.layer_norm_epsilon, config.activation_function in GELU_TANH
    tokens = g.op("Gather", [g.weight("wte", w("wte.weight")), "input_ids"])
    positions = g.op("Gather", [g.weight("wpe", w("wpe.weight")), "position_ids"])
    h, residual = fg.skip_layer_norm(g, tokens, positions, *_pair(g, w, "h.0.ln_1"), None, eps)
    for i in range(config.n_layer):
        p = f"h.{i}."
        scale = (1 / math.sqrt(head_dim) if config.scale_attn_weights else 1.0)
        scale /= (i + 1) if config.scale_attn_by_inverse_layer_idx else 1
        qkv = fg.linear(g, h, *_pair(g, w, p + "attn.c_attn"))
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads, scale)
        proj, proj_bias = _pair(g, w, p + "attn.c_proj")
        h, residual = fg.skip_layer_norm(g, fg.linear(g, attn, proj), residual, *_pair(g, w, p + "ln_2"),
                                         proj_bias, eps)
        fc, fc_bias = _pair(g, w, p + "mlp.c_fc")
        mlp, mlp_bias = _pair(g, w, p + "mlp.c_proj")
        hidden = fg.linear(g, fg.gelu(g, fg.linear(g, h, fc), fc_bias, tanh), mlp)
        after = f"h.{i + 1}.ln_1" if i + 1 < config.n_layer else "ln_f"
        h, residual = fg.skip_layer_norm(g, hidden, residual, *_pair(g, w, after), mlp_bias, eps)
    head = weights.get("lm_head.weight", w("wte.weight"))  # tied to wte unless the checkpoint unties it
    g.op("MatMul", [h, g.weight("lm_head", head.T)], ["logits"])
    return g.model("gpt2_fused_decode")


def _pair(g, w, name: str) -> tuple[str, str]:
    """A module's weight and bias as initializers (a Conv1D's [in, out] weight, or a LayerNorm's gamma, beta)."""
    return g.weight(name + ".weight", w(name + ".weight")), g.weight(name + ".bias", w(name + ".bias"))


BUILDER = fg.FusedBuilder(model_types=("gpt2",), version="1", build=build, refusal=refusal)  # bump the version when the graph changes
