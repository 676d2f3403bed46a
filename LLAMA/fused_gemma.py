"""Gemma 3's fused decode step (`--fused-decode` on frameworks for HF model type gemma3_text): its one-token step
in plain torch ops over our own static cache, laid out as the Llama step (LLAMA/fused_decode.py: an embedding
function, one layer function for every layer with that layer's weights as arguments, a head function, compiled
once; the cache one K and one V buffer per layer written in place at a write position held on the device).

What a layer computes, as HF's modeling code does: Gemma's RMS norm (x in fp32 times 1 / RMS(x), times
(1 + weight) in fp32, then rounded to the model's dtype: `gemma_norm`) before attention, one product for q, k and v,
the same norm of each query and key head, rotary positions from the table of the layer's type (sliding-window
layers have their own rotary base), grouped-query attention scaled by query_pre_attn_scalar ** -0.5 over the whole
buffer or, in a sliding-window layer, the window's columns, o_proj, a norm of the attention's output before the
residual add, a norm before the MLP, one product for gate and up, GELU(gate) (tanh's approximation) * up, down, and
a norm of the MLP's output before its residual add; the embeddings are scaled by the square root of the hidden
size in the model's dtype, and the head reads the final norm's output. The layer function is compiled once per
window (a sliding layer's and a full one's). On CUDA a one-row step's products run our Triton GEMV kernel and the
attention our Triton kernel (`CausalLM.fused_step`'s `product` and `attend`, as the Llama step's); the prompt pass
(`prompt_layer`) is compiled where the step is, on CUDA (`CausalLM.fused_step.prompt_function`).

Refused in one line: soft-capped scores or logits (Gemma 2's, where a config sets them), rope types whose
frequencies change with the sequence length, an activation other than GELU's tanh form, bidirectional attention.
The concatenated q/k/v and gate/up weights are copies: those weights are held twice while the step lives.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot, product,
                                 prompt_function, prompt_mask)
from LLAMA import attention
from LLAMA.fused_decode import queries_keys
from NNDF.errors import UsageError
from NNDF.slots import KVSlot

MODEL_TYPES = ("gemma3_text",)  # HF model types this step runs
SLIDING = "sliding_attention"  # the layer type whose attention reads a window (HF's `layer_types`)


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    check_model_type(config, MODEL_TYPES, "Gemma fused step")
    if config.hidden_activation != "gelu_pytorch_tanh":
        raise UsageError(f"--fused-decode: activation {config.hidden_activation!r} is not the GELU (tanh form) the "
                         "Gemma fused step implements; drop --fused-decode")
    caps = [name for name in ("attn_logit_softcapping", "final_logit_softcapping") if getattr(config, name, None)]
    if caps:
        raise UsageError(f"--fused-decode: this config soft-caps its {' and '.join(caps)}, which the Gemma fused step "
                         "does not implement; drop --fused-decode")
    if getattr(config, "use_bidirectional_attention", False):
        raise UsageError("--fused-decode: this config attends bidirectionally, which a decode step cannot; drop "
                         "--fused-decode")
    attention.check_fixed_rope(config)


def gemma_norm(x, gain, eps: float):
    """Gemma's RMS norm: x in fp32 times 1 / RMS(x), times `gain` (1 + the norm's weight, in fp32, made once), then
    rounded to x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * gain).to(x.dtype)


def layer_step(x, w: tuple, keys, values, write, valid, cos, sin, *, heads: int, kv_heads: int, eps: float,
               scale: float, forms: tuple, attention: str = "reduction", window: int | None = None):
    """One Gemma 3 layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    `valid` [R, L] the columns the token sees (the window's, in a sliding layer); `forms`: `product`'s form for
    q/k/v, o_proj, gate/up and down; `attention`: `attend`'s."""
    norm_in, qkv_w, qkv_b, qk_norm, o_w, o_b, norm_attn, norm_pre_mlp, gate_up_w, down_w, norm_mlp = w
    qkv_form, o_form, gate_up_form, down_form = forms
    rows, head_dim = x.shape[0], keys.shape[-1]
    qkv = product(gemma_norm(x, norm_in, eps), qkv_w, qkv_b, qkv_form)
    q, k = queries_keys(qkv[:, None], heads, kv_heads, head_dim, qk_norm, eps, cos, sin, norm=gemma_norm)
    keys[:, :, write] = k
    values[:, :, write] = qkv[:, (heads + kv_heads) * head_dim:].reshape(rows, kv_heads, 1, head_dim)
    a = attend(attention, q[:, :, 0], keys, values, write, valid, scale, window=window)
    x = x + gemma_norm(product(a.reshape(rows, heads * head_dim), o_w, o_b, o_form), norm_attn, eps)
    gate, up = product(gemma_norm(x, norm_pre_mlp, eps), gate_up_w, None, gate_up_form).chunk(2, dim=-1)
    return x + gemma_norm(product(F.gelu(gate, approximate="tanh") * up, down_w, None, down_form), norm_mlp, eps)


def prompt_layer(x, w: tuple, keys, values, start: int, allowed, cos, sin, *, heads: int, kv_heads: int,
                 eps: float, scale: float):
    """One Gemma 3 layer of the prompt pass: x [R, S, E] -> [R, S, E] at columns start.. of the buffers, whose K/V
    it writes; `allowed` [R, 1, S, total] the columns each query sees (the window's, in a sliding layer), cos/sin
    [R, 1, S, rot] of the layer's type."""
    norm_in, qkv_w, qkv_b, qk_norm, o_w, o_b, norm_attn, norm_pre_mlp, gate_up_w, down_w, norm_mlp = w
    rows, length, _ = x.shape
    d = keys.shape[-1]
    qkv = F.linear(gemma_norm(x, norm_in, eps), qkv_w, qkv_b)
    q, k = queries_keys(qkv, heads, kv_heads, d, qk_norm, eps, cos, sin, norm=gemma_norm)
    end = start + length
    keys[:, :, start:end] = k
    values[:, :, start:end] = qkv[..., (heads + kv_heads) * d:].reshape(rows, length, kv_heads, d).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed, scale=scale,
                                       enable_gqa=q.shape[1] != keys.shape[1])
    x = x + gemma_norm(F.linear(a.transpose(1, 2).reshape(rows, length, heads * d), o_w, o_b), norm_attn, eps)
    gate, up = F.linear(gemma_norm(x, norm_pre_mlp, eps), gate_up_w).chunk(2, dim=-1)
    return x + gemma_norm(F.linear(F.gelu(gate, approximate="tanh") * up, down_w), norm_mlp, eps)


def embed_step(ids, positions, mask, write, embed, embed_scale, tables: dict, window: int):
    """The step's scaled token embedding [R, E], the columns each row attends to in a full layer and in a sliding
    one [R, L], and each layer type's rotary cos/sin [R, 1, 1, rot]."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)
    at = positions[:, 0]
    rope = {t: (cos[at][:, None, None], sin[at][:, None, None]) for t, (cos, sin) in tables.items()}
    return embed[ids[:, 0]] * embed_scale, valid, valid & (columns[None, :] > write - window), rope


def head_step(x, norm, lm_w, eps: float, form: int):
    """Final norm and LM head: logits [R, 1, V]."""
    return product(gemma_norm(x, norm, eps), lm_w, None, form)[:, None, :]


class FusedGemmaStep:
    """The fused step of a loaded HF Gemma 3 text model: `new_slot`, `prefill` (the prompt pass) and `one_token`
    (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's functions with
    (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = attention.head_dim(config)
        self.eps, self.scale = config.rms_norm_eps, config.query_pre_attn_scalar ** -0.5
        self.window = config.sliding_window
        self.layer_types = list(config.layer_types)
        core = model.model
        self.embed = core.embed_tokens.weight.detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.embed_scale = torch.tensor(config.hidden_size ** 0.5).to(self.dtype).to(self.device)
        self.norm = _gain(core.norm)
        self.lm_head = model.lm_head.weight.detach()
        ids = torch.arange(config.max_position_embeddings, device=self.device)[None]
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        self.tables = {}
        for layer_type in sorted(set(self.layer_types)):
            cos, sin = core.rotary_emb(probe, ids, layer_type)
            self.tables[layer_type] = (cos[0].to(self.dtype), sin[0].to(self.dtype))
        self.layers = [_layer_weights(layer, self.heads, self.kv_heads) for layer in core.layers]
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)
        prompt = functools.partial(prompt_layer, heads=self.heads, kv_heads=self.kv_heads, eps=self.eps,
                                   scale=self.scale)
        self._prompt = prompt_function(prompt, self.compiled, self.device, self.settings)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), its buffers [rows, kv_heads, max_length, head_dim]."""
        return kv_slot(rows, max_length, len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        width = self.embed.shape[1]
        form = lambda features: self.settings.form(slot.rows, self.compiled, width, features, self.device)  # noqa: E731
        _, qkv_w, _, _, o_w, _, _, _, gate_up_w, down_w, _ = self.layers[0]
        forms = tuple(form(w.shape[1]) for w in (qkv_w, o_w, gate_up_w, down_w))
        x, valid, local, rope = self._embed(slot.ids, slot.positions, slot.mask, slot.write, self.embed,
                                            self.embed_scale, self.tables, self.window)
        # what a full-attention and a sliding-window layer read: their columns, the attention for at most that many,
        # the window
        full = (valid, self.settings.attention_on(self.device, slot.max_length, self.head_dim), None)
        near = (local, self.settings.attention_on(self.device, min(self.window, slot.max_length), self.head_dim),
                self.window)
        for layer_type, weights, keys, values in zip(self.layer_types, self.layers, slot.past[0::2],
                                                     slot.past[1::2]):
            seen, how, window = near if layer_type == SLIDING else full
            x = self._layer(x, weights, keys, values, slot.write, seen, *rope[layer_type], heads=self.heads,
                            kv_heads=self.kv_heads, eps=self.eps, scale=self.scale, forms=forms, attention=how,
                            window=window)
        head = self.settings.head_form(slot.rows, self.compiled, width, self.device)
        return self._head(x, self.norm, self.lm_head, eps=self.eps, form=head)

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far]. Each query
        sees the columns up to its own that the mask (and in a sliding layer, the window) keeps, and always itself
        (a padding row's query then stays finite, so later layers' K/V at padding columns do too)."""
        length = input_ids.shape[1]
        start = mask.shape[1] - length
        full, local = prompt_mask(mask, length), prompt_mask(mask, length, self.window)  # [R, 1, S, total]
        rope = {t: (cos[position_ids][:, None], sin[position_ids][:, None]) for t, (cos, sin) in self.tables.items()}
        x = self.embed[input_ids] * self.embed_scale
        for layer_type, weights, keys, values in zip(self.layer_types, self.layers, slot.past[0::2],
                                                     slot.past[1::2]):
            x = self._prompt(x, weights, keys, values, start, local if layer_type == SLIDING else full,
                             *rope[layer_type])
        if last_only:
            x = x[:, -1:]
        return F.linear(gemma_norm(x, self.norm, self.eps), self.lm_head)


def _gain(norm) -> torch.Tensor:
    """1 + a Gemma RMS norm's weight, in fp32 (what the norm multiplies by)."""
    return 1.0 + norm.weight.detach().float()


def _layer_weights(layer, heads: int, kv_heads: int) -> tuple:
    """One layer's weights as the layer functions take them: the norms' gains (`_gain`), q/k/v and gate/up each as
    one [out, in] product, the heads' norm gains one row a head (q_norm's on each query head, then k_norm's on each
    key head)."""
    attn, mlp = layer.self_attn, layer.mlp
    parts = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv_w = torch.cat([p.weight.detach() for p in parts])
    qkv_b = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    qk_norm = torch.cat([_gain(attn.q_norm).expand(heads, -1), _gain(attn.k_norm).expand(kv_heads, -1)])
    gate_up = torch.cat([mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()])
    o_b = None if attn.o_proj.bias is None else attn.o_proj.bias.detach()
    return (_gain(layer.input_layernorm), qkv_w, qkv_b, qk_norm, attn.o_proj.weight.detach(), o_b,
            _gain(layer.post_attention_layernorm), _gain(layer.pre_feedforward_layernorm), gate_up,
            mlp.down_proj.weight.detach(), _gain(layer.post_feedforward_layernorm))
