"""BLOOM's fused decode step (`--fused-decode` on frameworks, HF model type `bloom`: BLOOM, BLOOMZ, bloom-offline):
the one-token step in plain torch ops, for inductor, over our own static cache.

The layout is the other fused steps' (OPT/fused_decode.py, LLAMA/fused_decode.py): an embedding function, ONE
layer function called for every layer with that layer's weights as arguments (same shapes, so
`torch.compile(dynamic=False)` compiles it once however deep the model is), and a head function; the cache is one
K and one V buffer [rows, heads, length, head_dim] per layer, written in place at a write position held on the
device, so the step replays from a CUDA graph without host work (the capture is `CausalLM.torch_steps.TorchSteps`'s).

What it computes, as HF's modeling code does: the token embedding through `word_embeddings_layernorm`; per layer
`input_layernorm`, the packed query_key_value product as stored (its rows laid out per head, [H, 3, D]: q, k and
v are views of one product, no weight is copied), attention of the one query over the whole buffer with scores
q.k / sqrt(D) + slope_h * (key position - query position), masked by (column <= write position) and the row's
padding, `dense` and the residual add, `post_attention_layernorm`, dense_h_to_4h, bloom_gelu (the tanh
approximation, in fp32), dense_4h_to_h and the residual add (the residual is the layer norm's output instead with
apply_residual_connection_post_layernorm); `ln_f` and the LM head (tied to the embedding in every checkpoint).

ALiBi: HF adds slope_h * j to the scores, j a key's position among its row's unpadded tokens (the mask's cumsum,
so left padding shifts nothing). Softmax is unchanged by a constant per query, so the step adds slope_h * (j - i),
i the query's position: the same probabilities, and the biases of the keys that matter (the recent ones) stay
small, so fp16 rounds them little. The slopes are HF's (`BLOOM.attention.alibi_slopes`, any head count), made
once; the relative positions come from the slot's mask on the device (a cumsum per step: no host work): the
embedding function returns them [rows, length] in fp32 with the columns each row attends to, and every layer's
attention adds slope_h x them to its scores (`CausalLM.fused_step.attend`, our Triton kernel's `alibi` on CUDA).
On CUDA a one-row step's products run our Triton GEMV kernel (`NNDF.backends.torch.kernels`); elsewhere, and for
more rows, products of few rows in narrow models use the reduction form when compiled
(`CausalLM.fused_step.product`), cuBLAS otherwise (`FusedSettings`, `decoder_settings`). `pretraining_tp` with
`slow_but_exact` only splits HF's products into slices (the same sums in another order): the step does one
product.

The prompt pass (left-padded rows) is eager: F.linear and SDPA with the ALiBi bias as the additive part of a
causal + padding mask, writing the same buffers.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from BLOOM.attention import alibi_slopes
from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot,
                                 layer_norm, product, prompt_mask)
from NNDF.slots import KVSlot

MODEL_TYPES = ("bloom",)  # HF model types this step runs


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    check_model_type(config, MODEL_TYPES)




def bloom_gelu(x):
    """HF's bloom_gelu_forward (the tanh approximation), computed in fp32."""
    xf = x.float()
    return (xf * 0.5 * (1.0 + torch.tanh(0.79788456 * xf * (1 + 0.044715 * xf * xf)))).to(x.dtype)


def alibi_bias(slopes, keys_before, valid):
    """The scores' additive part [R, H, Q, K] (fp32): slope_h * (key position - query position) where `valid`
    [R, Q, K], else -inf. `keys_before` [R, Q, K]: key position - query position (any offset per query works)."""
    bias = slopes[None, :, None, None] * keys_before[:, None].float()
    return bias.masked_fill(~valid[:, None], float("-inf"))


def layer_step(x, w: tuple, keys, values, write, valid, alibi: tuple, *, heads: int, eps: float, scale: float,
               post: bool, forms: tuple, attention: str):
    """One BLOOM block for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    `alibi`: (slopes [H], key position - query position [R, L]); `forms`: `product`'s form for query_key_value,
    dense, dense_h_to_4h and dense_4h_to_h; `attention`: `attend`'s."""
    norm1, qkv_w, qkv_b, dense_w, dense_b, norm2, up_w, up_b, down_w, down_b = w
    qkv_form, dense_form, up_form, down_form = forms
    rows, embed = x.shape
    h = layer_norm(x, norm1, eps)
    qkv = product(h, qkv_w, qkv_b, qkv_form).reshape(rows, heads, 3, embed // heads)  # HF's per-head layout
    q, k, v = qkv.unbind(2)  # [R, H, D] each
    keys[:, :, write] = k[:, :, None, :]
    values[:, :, write] = v[:, :, None, :]
    attn = attend(attention, q, keys, values, write, valid, scale, alibi=alibi).reshape(rows, embed)
    x = (h if post else x) + product(attn, dense_w, dense_b, dense_form)
    h = layer_norm(x, norm2, eps)
    up = bloom_gelu(product(h, up_w, up_b, up_form))
    return (h if post else x) + product(up, down_w, down_b, down_form)


def embed_step(ids, mask, write, embed, norm: tuple, eps: float):
    """The step's embedding [R, E] (through word_embeddings_layernorm), the columns each row attends to [R, L]
    (its unpadded ones up to the write position) and ALiBi's relative positions there [R, L] fp32 (a key's
    position minus the query's, among the row's unpadded tokens)."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)  # [R, L]
    counted = valid.long().cumsum(-1)  # a key's position + 1; the last column: the query's position + 1
    return layer_norm(embed[ids[:, 0]], norm, eps), valid, (counted - counted[:, -1:]).float()


def head_step(x, norm: tuple, lm_w, eps: float, form: int):
    """The step's logits [R, 1, V]."""
    return product(layer_norm(x, norm, eps), lm_w, None, form)[:, None, :]


class FusedBloomStep:
    """The fused step of a loaded HF BLOOM (`BloomForCausalLM`): `new_slot`, `prefill` (the prompt pass) and
    `one_token` (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three
    functions with (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.heads, self.post = config.n_head, config.apply_residual_connection_post_layernorm
        self.head_dim = config.hidden_size // config.n_head
        self.width, self.scale = config.hidden_size, self.head_dim ** -0.5
        core = model.transformer
        self.eps = core.ln_f.eps
        self.embed = core.word_embeddings.weight.detach()
        self.embed_norm, self.final_norm = _norm(core.word_embeddings_layernorm), _norm(core.ln_f)
        self.lm_head = model.lm_head.weight.detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.slopes = alibi_slopes(self.heads, self.device)  # [H] fp32
        self.layers = [_layer_weights(layer) for layer in core.h]
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), its buffers [rows, heads, max_length, head_dim]."""
        return kv_slot(rows, max_length, len(self.layers), self.heads, self.head_dim, self.dtype, self.device)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        rows, settings = slot.rows, self.settings
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[1], w[3], w[6], w[8])
        attention = settings.attention_on(self.device, slot.max_length, self.head_dim, alibi=True)
        x, valid, offsets = self._embed(slot.ids, slot.mask, slot.write, self.embed, self.embed_norm, eps=self.eps)
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._layer(x, weights, keys, values, slot.write, valid, (self.slopes, offsets), heads=self.heads,
                            eps=self.eps, scale=self.scale, post=self.post, forms=forms, attention=attention)
        head = settings.head_form(rows, self.compiled, self.width, self.device)
        return self._head(x, self.final_norm, self.lm_head, eps=self.eps, form=head)

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass, eager: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far].
        Each query sees the columns up to its own that the mask keeps, and always itself (a padding row's query
        then stays finite, so later layers' K/V at padding columns do too). ALiBi's positions are the mask's."""
        length = input_ids.shape[1]
        start = mask.shape[1] - length
        own = start + torch.arange(length, device=mask.device)
        allowed = prompt_mask(mask, length)[:, 0]  # [R, S, total]
        counted = mask.long().cumsum(-1)  # [R, total]
        before = counted[:, None, :] - counted[:, own, None]  # [R, S, total]: key position - query position
        bias = alibi_bias(self.slopes, before, allowed).to(self.dtype)  # [R, H, S, total]
        x = layer_norm(self.embed[input_ids], self.embed_norm, self.eps)
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._prompt_layer(x, weights, keys, values, start, bias)
        if last_only:
            x = x[:, -1:]
        return F.linear(layer_norm(x, self.final_norm, self.eps), self.lm_head)

    def _prompt_layer(self, x, w: tuple, keys, values, start: int, bias):
        norm1, qkv_w, qkv_b, dense_w, dense_b, norm2, up_w, up_b, down_w, down_b = w
        rows, length, embed = x.shape
        h = layer_norm(x, norm1, self.eps)
        qkv = F.linear(h, qkv_w, qkv_b).reshape(rows, length, self.heads, 3, self.head_dim)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(3))  # [R, H, S, D] each
        end = start + length
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=bias,
                                           scale=self.scale)
        x = (h if self.post else x) + F.linear(a.transpose(1, 2).reshape(rows, length, embed), dense_w, dense_b)
        h = layer_norm(x, norm2, self.eps)
        return (h if self.post else x) + F.linear(bloom_gelu(F.linear(h, up_w, up_b)), down_w, down_b)


def _norm(norm) -> tuple:
    """A layer norm's (gain, bias)."""
    return norm.weight.detach(), norm.bias.detach()


def _layer_weights(layer) -> tuple:
    """One block's weights as the layer function takes them (as stored: nothing is copied)."""
    attn, mlp = layer.self_attention, layer.mlp
    return (_norm(layer.input_layernorm), attn.query_key_value.weight.detach(), attn.query_key_value.bias.detach(),
            attn.dense.weight.detach(), attn.dense.bias.detach(), _norm(layer.post_attention_layernorm),
            mlp.dense_h_to_4h.weight.detach(), mlp.dense_h_to_4h.bias.detach(), mlp.dense_4h_to_h.weight.detach(),
            mlp.dense_4h_to_h.bias.detach())
