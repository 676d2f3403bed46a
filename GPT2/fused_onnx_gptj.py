"""GPT-J's fused decode graph for `onnxrt --fused-decode` (HF model_type "gptj": GPT-J-6B, gptj-offline), built
from the HF weights with the shared pieces of `CausalLM.fused_graph`. GPT-J runs attention and MLP in parallel
from one norm of the residual stream:

    x = wte[ids]                                            -> the residual stream
    h = LayerNorm(x) (layer 0's ln_1)
    per layer: attn = GroupQueryAttention(h @ [q; k; v])    (rotary in the op; the cache written in place)
               u = FastGelu(h @ fc_in, bias)                (the same h: x + attn(ln_1(x)) + mlp(ln_1(x)))
               SkipLayerNorm([attn, u] @ [out_proj; fc_out], residual, fc_out's bias)
                                                            -> the next ln_1 (the last: ln_f)
    logits = ln_f @ lm_head^T + lm_head's bias

The two branches' output products are one product over their outputs side by side (attn @ out_proj + u @ fc_out
= [attn, u] @ [out_proj; fc_out]): one product and a Concat of two rows a layer where there were two products and
an Add, 2-4% faster a token on an H100 at GPT-J-6B shapes (docs/PERFORMANCE.md G65). Joining the input side too
(q/k/v with fc_in, then a Split) was slower there: cuBLAS read that product no faster and the Split cost more.

Rotary: GPT-J turns interleaved column pairs (2j, 2j + 1) of the first rotary_dim columns of every query and key
head (`rotate_every_two`) with HF's sinusoid tables (`create_sinusoidal_positions`, made here on the CPU). The
query and key rows of the projection are permuted at build time into the op's half-split form, widened to a
rotary width the CUDA kernel takes (`fused_graph.rotary_layout`: q.k is unchanged by one permutation of both).
The op takes each token's position from its row's length, so rows start at position 0. Every weight of the
checkpoint must be used (else the build fails naming the ones left over); the causal-mask constants old
checkpoints store (`attn.bias`, `attn.masked_bias`) are not weights.
"""
from __future__ import annotations

import math
import re

import numpy as np
import torch

from CausalLM import fused_graph as fg
from CausalLM.ort_fused import VALIDATION_CACHE
from GPT2.config import FUSED_GELUS

MASK_BUFFERS = re.compile(r"attn\.(masked_)?bias$")  # old checkpoints' causal-mask constants, not weights


def rotary_refusal(head_dim: int, rotary_dim: int | None) -> str | None:
    """Why the attention op cannot rotate `rotary_dim` of a head's `head_dim` columns (None: it can)."""
    if rotary_dim and rotary_dim % 2 == 0 and head_dim % 16 == 0 and 2 * (-(-rotary_dim // 16) * 8) <= head_dim:
        return None
    return (f"onnxrt --fused-decode's attention op rotates an even number of columns of heads whose size is a "
            f"multiple of 16, over a width of a multiple of 16; this model's head size is {head_dim}, its rotary "
            f"columns {rotary_dim}")


def refusal(config) -> str | None:
    """Why this GPT-J model has no fused graph here (None: it has one)."""
    if config.activation_function not in FUSED_GELUS:
        return (f"onnxrt --fused-decode has no fused op for activation {config.activation_function!r} "
                f"(it has {', '.join(FUSED_GELUS)})")
    return rotary_refusal(config.n_embd // config.n_head, config.rotary_dim)


def build(arch, take: fg.StateDict, g: fg.GraphBuilder) -> "fg.onnx.ModelProto":
    """The fused decode graph of a GPTJForCausalLM (`arch`: its config and structure) from the checkpoint's
    weights (`take`), into `g`."""
    config = arch.config
    heads, head_dim, eps = config.n_head, config.n_embd // config.n_head, config.layer_norm_epsilon
    pasts = fg.decode_io(g, config.n_layer, heads, head_dim, config.vocab_size)
    order, width = fg.rotary_layout(head_dim, [(2 * j, 2 * j + 1) for j in range(config.rotary_dim // 2)])
    rotary = fg.rotary_tables(g, *_sinusoids(config), width)
    # [B, S, E]; the LM head's initializer
    x, head = fg.embedding_and_head(g, take, arch, "transformer.wte.weight", "lm_head.weight")
    h = fg.layer_norm(g, x, *fg.norm_weights(g, take, "transformer.h.0.ln_1"), eps)
    residual = x
    tanh = FUSED_GELUS[config.activation_function] == "tanh"
    for i in range(config.n_layer):
        layer = f"transformer.h.{i}"
        names = [f"{layer}.attn.{p}_proj.weight" for p in "qkv"]
        qkv = g.matmul(h, f"{layer}.attn.qkv_proj.weight", qkv_weight(take, names, heads, order))
        attn = fg.attention(g, qkv, pasts[i], (f"present.{i}.key", f"present.{i}.value"), heads,
                            1 / math.sqrt(head_dim), rotary=rotary)  # [B, S, E]
        fc_in = fg.projection(g, take, h, f"{layer}.mlp.fc_in", bias=False)  # [B, S, 4E]
        inner = fg.gelu(g, fc_in, g.weight(f"{layer}.mlp.fc_in.bias", take(f"{layer}.mlp.fc_in.bias")), tanh)
        # [E, E + 4E]: out_proj's and fc_out's inputs side by side
        both = np.concatenate([take(f"{layer}.attn.out_proj.weight"), take(f"{layer}.mlp.fc_out.weight")], axis=1)
        both = g.matmul(g.op("Concat", [attn, inner], axis=-1), f"{layer}.out_fc_out.weight", both)
        after = f"transformer.h.{i + 1}.ln_1" if i + 1 < config.n_layer else "transformer.ln_f"
        bias = g.weight(f"{layer}.mlp.fc_out.bias", take(f"{layer}.mlp.fc_out.bias"))
        h, residual = fg.skip_layer_norm(g, both, residual, *fg.norm_weights(g, take, after), bias, eps)
    fg.logits(g, h, head, g.weight("lm_head.bias", take("lm_head.bias")))  # [B, S', V]
    take.used.update(name for name in take.names if MASK_BUFFERS.search(name))
    take.check_all_used()
    return g.model("gptj_fused_decode")


def _sinusoids(config) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [positions, rotary_dim / 2] from HF's own table (sin then cos per position), with a row for every
    column of the buffer: the model's positions, and the build's validation buffer where that is longer."""
    from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

    rows = max(config.max_position_embeddings, VALIDATION_CACHE)
    with torch.device("cpu"):
        table = create_sinusoidal_positions(rows, config.rotary_dim).float().numpy()  # [P, rotary_dim]
    sin, cos = np.split(table, 2, axis=1)
    return cos, sin


def qkv_weight(take: fg.StateDict, names: list[str], heads: int, order: np.ndarray) -> np.ndarray:
    """[3 * H * D, E]: the query, key and value projections (nn.Linear's [out, in]) stacked for one product, each
    query and key head's rows in the rotary `order`."""
    q, k, v = (take(name) for name in names)
    return np.concatenate([fg.permute_heads(q, heads, order), fg.permute_heads(k, heads, order), v])


# bump the version when the graph changes
BUILDER = fg.FusedBuilder(model_types=("gptj",), version="3", build=build, refusal=refusal)
