"""GPT-J's and GPT-NeoX's fused decode step (`--fused-decode` on `frameworks`, HF model types `gptj` and
`gpt_neox`): the one-token step in plain torch ops, for inductor, over our own static cache.

The layout is the other fused steps' (GPT2/fused_decode.py, OPT/fused_decode.py, LLAMA/fused_decode.py): an
embedding function, ONE layer function called for every layer with that layer's weights as arguments (same
shapes, so `torch.compile(dynamic=False)` compiles it once however deep the model is), and a head function; the
cache is one K and one V buffer [rows, heads, length, head_dim] per layer, written in place at a write position
held on the device, so the step replays from a CUDA graph without host work (the capture is
`CausalLM.torch_steps.TorchSteps`'s).

What the layer computes, as HF's modeling code does, for both models: a layer norm, one product for q, k and v,
rotary positions on the first rotary_dim columns of each query and key head (the rest pass through), attention of
the one query over the whole buffer masked by (column <= write position) and the row's padding mask, the output
projection, and an MLP of two products around a GELU (`GPT2.config.FUSED_GELUS`: the tanh form or the exact one).
The residual (`Residual`):
  - GPT-J, "shared": x + attn(ln_1(x)) + mlp(ln_1(x)), one norm feeding both branches;
  - GPT-NeoX with use_parallel_residual, "parallel": x + attn(ln1(x)) + mlp(ln2(x)), two norms of the same x;
  - GPT-NeoX without it, "sequential": y = x + attn(ln1(x)); y + mlp(ln2(y)).
Then the final layer norm and the LM head (GPT-J's with its bias).

The products' layouts, at load: GPT-J's q, k and v (no biases) are concatenated into one [3E, E] weight (a copy),
and within each head the rotary rows of q and k are reordered from interleaved pairs (2i, 2i + 1) to half-split
pairs (i, i + rotary_dim / 2) (the same permutation for q and k leaves q.k unchanged; the cache holds keys in that
order), so both models turn their columns the same way. GPT-NeoX's query_key_value is used as stored: its rows
are head by head ([H, 3, D]: each head's q, k and v), split per head after the product (no copy, which matters at
20B). The rotary cos/sin tables [positions, rotary_dim] are computed once at load by HF's own code on the model's
device: GPT-J's `embed_positions` buffer (sin then cos, per pair), GPT-NeoX's rotary module (rope types whose
frequencies change with the sequence length are refused); the rows are indexed by the position ids the loop
passes (which skip left padding). Attention is computed in fp32 (HF's GPT-J does too). On CUDA a one-row step's
products and its attention run our Triton kernels (`NNDF.backends.torch.kernels`); elsewhere, and for more rows,
products of few rows in narrow models use the reduction form when compiled (`CausalLM.fused_step.product`), cuBLAS
otherwise (`FusedSettings`, `decoder_settings`).

The prompt pass (left-padded rows) is eager: F.linear and SDPA with a causal + padding mask, writing the same
buffers.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot,
                                 layer_norm, product, prompt_mask)
from GPT2.config import FUSED_GELUS
from NNDF.errors import UsageError
from NNDF.slots import KVSlot

MODEL_TYPES = ("gptj", "gpt_neox")  # HF model types this step runs
FIXED_ROPE = ("default", "linear", "llama3", "yarn")  # rope types whose tables do not change with the length
RESIDUALS = ("shared", "parallel", "sequential")  # see the module docstring


def activation(config) -> str:
    """The model's activation name (GPT-J: activation_function, GPT-NeoX: hidden_act)."""
    return config.activation_function if config.model_type == "gptj" else config.hidden_act


def rope_type(config) -> str:
    rope = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    return rope.get("rope_type", rope.get("type", "default"))


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    check_model_type(config, MODEL_TYPES)
    act = activation(config)
    if act not in FUSED_GELUS:
        raise UsageError(f"--fused-decode: activation {act!r} is not one the fused step implements "
                         f"({', '.join(FUSED_GELUS)}); drop --fused-decode")
    if config.model_type == "gpt_neox" and rope_type(config) not in FIXED_ROPE:
        raise UsageError(f"--fused-decode: rope type {rope_type(config)!r} changes its frequencies with the "
                         "sequence length, which the fused step's precomputed table does not; drop --fused-decode")


def rotate(x, cos, sin):
    """Half-split rotary positions on the first cos.shape[-1] features of x [..., D] (the rest pass through);
    cos/sin broadcast against x[..., :rot]."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)


def split_qkv(qkv, heads: int, per_head: bool):
    """q, k, v [..., H, D] of the product's output [..., 3E]: all query heads, then key heads, then value heads;
    or `per_head` (GPT-NeoX's query_key_value) each head's q, k and v in turn."""
    lead = qkv.shape[:-1]
    if per_head:
        return qkv.reshape(*lead, heads, 3, -1).unbind(-2)
    return (t.reshape(*lead, heads, -1) for t in qkv.chunk(3, dim=-1))


def mlp(h, fc_w, fc_b, proj_w, proj_b, gelu: str, forms: tuple):
    """The MLP's two products around the GELU; `forms`: `product`'s form for each."""
    return product(F.gelu(product(h, fc_w, fc_b, forms[0]), approximate=gelu), proj_w, proj_b, forms[1])


def residual_block(x, w: tuple, attention, *, eps: float, gelu: str, residual: str, forms: tuple = (0, 0, 0)):
    """The layer around its attention (`attention`: normed input -> the branch's output before out_proj):
    x [..., E] -> [..., E] with the residual form `residual` (RESIDUALS). `forms`: `product`'s form for the
    output projection and the MLP's two products."""
    norm1, norm2, _, _, out_w, out_b, fc_w, fc_b, proj_w, proj_b = w
    h = layer_norm(x, norm1, eps)
    a = product(attention(h), out_w, out_b, forms[0])
    if residual == "shared":
        return x + a + mlp(h, fc_w, fc_b, proj_w, proj_b, gelu, forms[1:])
    if residual == "parallel":
        return x + a + mlp(layer_norm(x, norm2, eps), fc_w, fc_b, proj_w, proj_b, gelu, forms[1:])
    y = x + a
    return y + mlp(layer_norm(y, norm2, eps), fc_w, fc_b, proj_w, proj_b, gelu, forms[1:])


def layer_step(x, w: tuple, keys, values, write, valid, cos, sin, *, heads: int, eps: float, gelu: str,
               scale: float, residual: str, per_head: bool, forms: tuple, attention: str):
    """One layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1]. `forms`:
    `product`'s form for query_key_value, the output projection and the MLP's two; `attention`: `attend`'s."""
    qkv_w, qkv_b = w[2], w[3]

    def attend_branch(h):
        q, k, v = split_qkv(product(h, qkv_w, qkv_b, forms[0]), heads, per_head)  # each [R, H, D]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        keys[:, :, write] = k[:, :, None, :]
        values[:, :, write] = v[:, :, None, :]
        return attend(attention, q, keys, values, write, valid, scale).reshape(h.shape)

    return residual_block(x, w, attend_branch, eps=eps, gelu=gelu, residual=residual, forms=forms[1:])


def embed_step(ids, positions, mask, write, embed, cos_table, sin_table):
    """The step's token embedding [R, E], which columns each row attends to [R, L], and its rotary cos/sin
    [R, 1, rot]."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)
    at = positions[:, 0]
    return embed[ids[:, 0]], valid, cos_table[at][:, None], sin_table[at][:, None]


def head_step(x, norm: tuple, lm_w, lm_b, eps: float, form: int):
    """Final layer norm and LM head: logits [R, 1, V]."""
    return product(layer_norm(x, norm, eps), lm_w, lm_b, form)[:, None, :]


class Parts(NamedTuple):
    """A loaded model's tensors as the step takes them (`_gptj_parts`, `_neox_parts`)."""

    embed: torch.Tensor  # [V, E]
    layers: list  # per layer: (norm1, norm2, qkv_w, qkv_b, out_w, out_b, fc_w, fc_b, proj_w, proj_b)
    final_norm: tuple  # (gain, bias)
    lm_head: tuple  # (weight [V, E], bias or None)
    cos: torch.Tensor  # [positions, rot], the model's dtype
    sin: torch.Tensor
    eps: float
    residual: str  # RESIDUALS
    per_head: bool  # query_key_value rows head by head (GPT-NeoX)


class FusedRotaryStep:
    """The fused step of a loaded HF GPT-J (`GPTJForCausalLM`) or GPT-NeoX (`GPTNeoXForCausalLM`): `new_slot`,
    `prefill` (the prompt pass) and `one_token` (the step a CUDA graph captures). `compile_options`: inductor
    options to compile the step's three functions with (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.heads, self.width = config.num_attention_heads, config.hidden_size
        self.head_dim = self.width // self.heads
        self.scale, self.gelu = self.head_dim ** -0.5, FUSED_GELUS[activation(config)]
        self.parts = _gptj_parts(model) if config.model_type == "gptj" else _neox_parts(model)
        self.dtype, self.device = self.parts.embed.dtype, self.parts.embed.device
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), its buffers [rows, heads, max_length, head_dim]."""
        return kv_slot(rows, max_length, len(self.parts.layers), self.heads, self.head_dim, self.dtype, self.device)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        p, rows, settings = self.parts, slot.rows, self.settings
        w = p.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[2], w[4], w[6], w[8])
        attention = settings.attention_on(self.device, slot.max_length, self.head_dim)
        x, valid, cos, sin = self._embed(slot.ids, slot.positions, slot.mask, slot.write, p.embed, p.cos, p.sin)
        for weights, keys, values in zip(p.layers, slot.past[0::2], slot.past[1::2]):
            x = self._layer(x, weights, keys, values, slot.write, valid, cos, sin, heads=self.heads, eps=p.eps,
                            gelu=self.gelu, scale=self.scale, residual=p.residual, per_head=p.per_head,
                            forms=forms, attention=attention)
        head = settings.head_form(rows, self.compiled, self.width, self.device)
        return self._head(x, p.final_norm, *p.lm_head, eps=p.eps, form=head)

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass, eager: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far].
        Each query sees the columns up to its own that the mask keeps, and always itself (a padding row's query
        then stays finite, so later layers' K/V at padding columns do too)."""
        p = self.parts
        start = mask.shape[1] - input_ids.shape[1]
        allowed = prompt_mask(mask, input_ids.shape[1])  # [R, 1, S, total]
        cos, sin = p.cos[position_ids][:, :, None], p.sin[position_ids][:, :, None]  # [R, S, 1, rot]
        x = p.embed[input_ids]
        for weights, keys, values in zip(p.layers, slot.past[0::2], slot.past[1::2]):
            x = self._prompt_layer(x, weights, keys, values, start, allowed, cos, sin)
        if last_only:
            x = x[:, -1:]
        return F.linear(layer_norm(x, p.final_norm, p.eps), *p.lm_head)

    def _prompt_layer(self, x, w: tuple, keys, values, start: int, allowed, cos, sin):
        end = start + x.shape[1]

        def attention(h):
            q, k, v = split_qkv(F.linear(h, w[2], w[3]), self.heads, self.parts.per_head)  # each [R, S, H, D]
            q, k, v = (t.transpose(1, 2) for t in (rotate(q, cos, sin), rotate(k, cos, sin), v))  # [R, H, S, D]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed,
                                               scale=self.scale)
            return a.transpose(1, 2).reshape(h.shape)

        return residual_block(x, w, attention, eps=self.parts.eps, gelu=self.gelu, residual=self.parts.residual)


def _detach(t):
    return None if t is None else t.detach()


def _norm(norm) -> tuple:
    return norm.weight.detach(), _detach(norm.bias)


def _linear(linear) -> tuple:
    return linear.weight.detach(), _detach(linear.bias)


def _gptj_parts(model) -> Parts:
    """GPT-J's tensors: q/k/v concatenated with their rotary rows reordered to half-split pairs (a copy), the
    rotary table from layer 0's `embed_positions` (sin then cos per pair, as HF reads it)."""
    core, config = model.transformer, model.config
    heads, width = config.n_head, config.n_embd
    head_dim = width // heads
    table = core.h[0].attn.embed_positions  # [positions, rot]: sin of each pair, then cos
    rot = table.shape[-1]
    if rot > head_dim:
        raise UsageError(f"--fused-decode: this GPT-J config rotates {rot} columns of {head_dim}-column heads "
                         "(rotary_dim unset with several heads), which HF's own code cannot run; drop --fused-decode")
    order = torch.cat([torch.arange(0, rot, 2), torch.arange(1, rot, 2), torch.arange(rot, head_dim)])
    order = order.to(table.device)
    dtype = core.wte.weight.dtype
    sin, cos = (t.to(dtype) for t in table.chunk(2, dim=-1))
    layers = []
    for block in core.h:
        attn, ffn = block.attn, block.mlp
        q, k = (p.weight.detach().reshape(heads, head_dim, width)[:, order].reshape(width, width)
                for p in (attn.q_proj, attn.k_proj))
        qkv_w = torch.cat([q, k, attn.v_proj.weight.detach()])
        norm = _norm(block.ln_1)
        layers.append((norm, None, qkv_w, None, *_linear(attn.out_proj), *_linear(ffn.fc_in), *_linear(ffn.fc_out)))
    return Parts(core.wte.weight.detach(), layers, _norm(core.ln_f), _linear(model.lm_head),
                 torch.cat([cos, cos], -1), torch.cat([sin, sin], -1), core.ln_f.eps, "shared", False)


def _neox_parts(model) -> Parts:
    """GPT-NeoX's tensors as stored; the rotary table from HF's rotary module for every position."""
    core, config = model.gpt_neox, model.config
    dtype, device = core.embed_in.weight.dtype, core.embed_in.weight.device
    ids = torch.arange(config.max_position_embeddings, device=device)[None]
    cos, sin = core.rotary_emb(torch.zeros(1, dtype=dtype, device=device), ids)  # [1, positions, rot]
    layers = [(_norm(layer.input_layernorm), _norm(layer.post_attention_layernorm),
               *_linear(layer.attention.query_key_value), *_linear(layer.attention.dense),
               *_linear(layer.mlp.dense_h_to_4h), *_linear(layer.mlp.dense_4h_to_h)) for layer in core.layers]
    residual = "parallel" if config.use_parallel_residual else "sequential"
    return Parts(core.embed_in.weight.detach(), layers, _norm(core.final_layer_norm),
                 _linear(model.get_output_embeddings()), cos[0].to(dtype), sin[0].to(dtype),
                 core.final_layer_norm.eps, residual, True)
