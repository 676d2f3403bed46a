"""BART's and mBART's static-cache decoder step (`--static-cache` on frameworks, HF model types `bart` and
`mbart`): the one-token decoder step in plain torch ops, for inductor, over a `Seq2Seq.fused_step.Seq2SeqSlot`.

The layout is the decoder-only fused steps' (OPT/fused_decode.py): an embedding function, ONE layer function
called for every layer with that layer's weights and buffers as arguments (same shapes, so
`torch.compile(dynamic=False)` compiles it once however deep the decoder is), and a head function. The self-attention
keys and values are written in place at `slot.write` (on the device), so a CUDA graph replays the step without
host work; the cross-attention keys and values are computed once per input by `cross` from the encoder's output.

What it computes, as HF's BartDecoder / MBartDecoder do: the token embedding times embed_scale (sqrt(d_model) with
`scale_embedding`, mBART; else 1) plus a learned position embedding at decoder position + 2, then
`layernorm_embedding`. Per layer: self-attention (one product for q, k and v, concatenated once at load; the query
scaled by head_dim ** -0.5; one query over the whole buffer masked by column <= write), cross-attention (q its own
product, over the encoder columns the encoder mask keeps), the FFN (fc1, the config's activation, fc2), each a
residual add; BART normalises after each add (post-norm), mBART before each block (pre-norm) and once more at the
end (the decoder's `layer_norm`). Then the LM head plus `final_logits_bias`. HF clamps fp16 hidden states only in
the encoder's layers (which run as HF's module), never in the decoder's, so this step does not clamp either.
The products and both attentions take the forms the step's settings give (`Seq2Seq.fused_step.seq2seq_settings`:
on CUDA our Triton GEMV for one row's products and our attention kernels, cuBLAS for more rows; elsewhere the
reduction form for one compiled row, plain-op attention).

The decoder prompt pass (`prefill`, never padded: every row starts at position 0) is eager: F.linear and SDPA,
writing the same buffers. The concatenated q/k/v and cross k/v weights are copies, held twice while the step lives.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from CausalLM.fused_step import FusedSettings, attend, compiled, layer_norm, product
from NNDF.errors import UsageError
from Seq2Seq.fused_step import Seq2SeqSlot, seq2seq_slot, seq2seq_settings, write_kv

MODEL_TYPES = ("bart", "mbart")  # HF model types this step runs
PRE_NORM = ("mbart",)  # model types whose layers normalise before each block and whose decoder ends in a layer norm
POSITION_OFFSET = 2  # the learned position table starts two rows in (HF's BartLearnedPositionalEmbedding.offset)
ACTIVATIONS = {  # HF's ACT2FN names this step reproduces -> the torch op
    "gelu": F.gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
}


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        raise UsageError(f"--static-cache: model type {config.model_type!r} is not BART's step's "
                         f"(model types: {', '.join(MODEL_TYPES)})")
    if config.activation_function not in ACTIVATIONS:
        raise UsageError(f"--static-cache: activation {config.activation_function!r} is not one the BART step "
                         f"implements ({', '.join(ACTIVATIONS)}); drop --static-cache")


def layer_step(x, w: tuple, keys, values, cross_keys, cross_values, write, encoder_last, valid, cross_valid, *,
               heads: int, eps: float, scale: float, pre_norm: bool, activation: str, forms: tuple, attention: tuple):
    """One decoder layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1]. valid
    [R, L]: the columns up to the write position; cross_valid [R, T]: the encoder's real columns (up to
    `encoder_last` [1]). `forms`: `product`'s form for q/k/v, out_proj, the cross-attention's q and out_proj, fc1
    and fc2; `attention`: `CausalLM.fused_step.attend`'s for the self- and the cross-attention."""
    (norm1, qkv_w, qkv_b, out_w, out_b, norm2, cq_w, cq_b, cout_w, cout_b,
     norm3, fc1_w, fc1_b, fc2_w, fc2_b) = w
    qkv_form, out_form, cq_form, cout_form, fc1_form, fc2_form = forms
    rows, embed = x.shape
    head_dim = embed // heads
    qkv = product(layer_norm(x, norm1, eps) if pre_norm else x, qkv_w, qkv_b, qkv_form)  # [R, 3E]
    q, k, v = (t.reshape(rows, heads, head_dim) for t in qkv.split(embed, dim=-1))
    keys, values = write_kv(keys, values, k, v, write)
    a = attend(attention[0], q, keys, values, write, valid, scale)
    x = x + product(a.reshape(rows, embed), out_w, out_b, out_form)
    x = x if pre_norm else layer_norm(x, norm1, eps)
    q = product(layer_norm(x, norm2, eps) if pre_norm else x, cq_w, cq_b, cq_form).reshape(rows, heads, head_dim)
    a = attend(attention[1], q, cross_keys, cross_values, encoder_last, cross_valid, scale)
    x = x + product(a.reshape(rows, embed), cout_w, cout_b, cout_form)
    x = x if pre_norm else layer_norm(x, norm2, eps)
    h = ACTIVATIONS[activation](product(layer_norm(x, norm3, eps) if pre_norm else x, fc1_w, fc1_b, fc1_form))
    x = x + product(h, fc2_w, fc2_b, fc2_form)
    return x if pre_norm else layer_norm(x, norm3, eps)


def embed_step(ids, write, encoder_mask, embed, embed_scale: float, pos_table, norm: tuple, eps: float, length: int):
    """The step's embedding [R, E], which self-attention columns each row reads [R, L] (`length` = L) and which
    encoder columns [R, T]."""
    columns = torch.arange(length, device=ids.device)
    valid = (columns <= write).expand(ids.shape[0], length)
    x = embed[ids[:, 0]] * embed_scale + pos_table[write + POSITION_OFFSET]  # [R, E] + [1, E]
    return layer_norm(x, norm, eps), valid, encoder_mask != 0


def head_step(x, norm: tuple | None, lm_w, bias, eps: float, form: int):
    """The step's logits [R, 1, V] (`head`)."""
    return head(x, norm, lm_w, bias, eps, form)[:, None, :]


def head(x, norm: tuple | None, lm_w, bias, eps: float, form: int = 0):
    """The decoder's final layer norm (mBART) and the LM head (`product`'s `form`) plus final_logits_bias [1, V]:
    [..., E] -> [..., V] (in HF's dtype: the bias's type promotion applies as in HF)."""
    if norm is not None:
        x = layer_norm(x, norm, eps)
    return product(x, lm_w, None, form) + bias


class FusedBartStep:
    """The static-cache decoder step of a loaded HF BART or mBART (`BartForConditionalGeneration`,
    `MBartForConditionalGeneration`): `new_slot`, `cross`, `prefill` and `one_token` (what a CUDA graph captures),
    as `Seq2Seq.fused_step.FusedSeq2SeqStep` states them. `compile_options`: inductor options to compile the step's
    three functions with (`{}`: inductor's defaults), or None to run them eagerly; `settings`: the step's internal
    choices (`Seq2Seq.fused_step.seq2seq_settings`)."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = seq2seq_settings(settings), compile_options is not None
        self.pre_norm, self.activation = config.model_type in PRE_NORM, config.activation_function
        self.heads, self.width = config.decoder_attention_heads, config.d_model
        self.head_dim = self.width // self.heads
        self.scale, self.embed_scale = self.head_dim ** -0.5, math.sqrt(self.width) if config.scale_embedding else 1.0
        core = model.get_decoder()
        self.eps = core.layernorm_embedding.eps
        self.embed = core.embed_tokens.weight.detach()
        self.positions = core.embed_positions.weight.detach()
        self.embed_norm = _norm(core.layernorm_embedding)
        self.final_norm = _norm(core.layer_norm) if self.pre_norm else None
        self.lm_head, self.bias = model.lm_head.weight.detach(), model.final_logits_bias.detach()  # [V, E], [1, V]
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.layers = [_layer_weights(layer) for layer in core.layers]
        self.cross_kv = [_kv_weights(layer.encoder_attn) for layer in core.layers]
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        """Zeroed buffers [rows, heads, max_length or encoder_length, head_dim] for every decoder layer."""
        return seq2seq_slot(rows, max_length, encoder_length, len(self.layers), self.heads, self.head_dim,
                            self.dtype, self.device)

    def cross(self, hidden: torch.Tensor, slot: Seq2SeqSlot) -> None:
        """Every layer's cross-attention keys and values of the encoder output hidden [R, T, E], into slot.cross."""
        rows, length, _ = hidden.shape
        for (kv_w, kv_b), keys, values in zip(self.cross_kv, slot.cross[0::2], slot.cross[1::2]):
            kv = F.linear(hidden, kv_w, kv_b).reshape(rows, length, 2, self.heads, self.head_dim)
            keys.copy_(kv[:, :, 0].transpose(1, 2))
            values.copy_(kv[:, :, 1].transpose(1, 2))

    def one_token(self, slot: Seq2SeqSlot) -> torch.Tensor:
        """Logits [R, 1, V] of slot.ids at decoder position slot.write, its K/V written there."""
        rows, settings = slot.rows, self.settings
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[1], w[3], w[6], w[8], w[11], w[13])
        attention = (settings.attention_on(self.device, slot.max_length, self.head_dim, rows=rows),
                     settings.attention_on(self.device, slot.encoder_length, self.head_dim, rows=rows))
        x, valid, cross_valid = self._embed(slot.ids, slot.write, slot.encoder_mask, self.embed, self.embed_scale,
                                            self.positions, self.embed_norm, self.eps, slot.max_length)
        buffers = zip(self.layers, *slot.layer_buffers(settings.paired_kv_write), slot.cross[0::2], slot.cross[1::2])
        for weights, keys, values, cross_keys, cross_values in buffers:
            x = self._layer(x, weights, keys, values, cross_keys, cross_values, slot.write, slot.encoder_last, valid,
                            cross_valid, heads=self.heads, eps=self.eps, scale=self.scale, pre_norm=self.pre_norm,
                            activation=self.activation, forms=forms, attention=attention)
        return self._head(x, self.final_norm, self.lm_head, self.bias, eps=self.eps,
                          form=settings.head_form(rows, self.compiled, self.width, self.device))

    def prefill(self, input_ids: torch.Tensor, slot: Seq2SeqSlot, last_only: bool) -> torch.Tensor:
        """The decoder prompt's logits [R, S, V] ([R, 1, V] when `last_only`), eager: input_ids [R, S] at decoder
        positions 0..S-1, their K/V written to columns 0..S-1 of slot.past."""
        length = input_ids.shape[1]
        x = self.embed[input_ids] * self.embed_scale + self.positions[POSITION_OFFSET:POSITION_OFFSET + length]
        x = layer_norm(x, self.embed_norm, self.eps)  # [R, S, E]
        cross_bias = _additive_mask(slot.encoder_mask, x.dtype)  # [R, 1, 1, T]
        buffers = zip(self.layers, slot.past[0::2], slot.past[1::2], slot.cross[0::2], slot.cross[1::2])
        for weights, keys, values, cross_keys, cross_values in buffers:
            x = self._prompt_layer(x, weights, (keys, values), (cross_keys, cross_values), cross_bias)
        if last_only:
            x = x[:, -1:]
        return head(x, self.final_norm, self.lm_head, self.bias, self.eps)

    def _prompt_layer(self, x, w: tuple, past: tuple, cross: tuple, cross_bias):
        (norm1, qkv_w, qkv_b, out_w, out_b, norm2, cq_w, cq_b, cout_w, cout_b,
         norm3, fc1_w, fc1_b, fc2_w, fc2_b) = w
        rows, length, embed = x.shape
        split = (rows, length, self.heads, self.head_dim)  # -> [R, H, S, D] after the transpose
        qkv = F.linear(self._pre(x, norm1), qkv_w, qkv_b)
        q, k, v = (t.reshape(split).transpose(1, 2) for t in qkv.split(embed, dim=-1))
        past[0][:, :, :length] = k
        past[1][:, :, :length] = v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        x = self._post(x + F.linear(a.transpose(1, 2).reshape(x.shape), out_w, out_b), norm1)
        q = F.linear(self._pre(x, norm2), cq_w, cq_b).reshape(split).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, cross[0], cross[1], attn_mask=cross_bias, scale=self.scale)
        x = self._post(x + F.linear(a.transpose(1, 2).reshape(x.shape), cout_w, cout_b), norm2)
        h = ACTIVATIONS[self.activation](F.linear(self._pre(x, norm3), fc1_w, fc1_b))
        return self._post(x + F.linear(h, fc2_w, fc2_b), norm3)

    def _pre(self, x, norm: tuple):
        """A block's input: normalised first in pre-norm layers (mBART)."""
        return layer_norm(x, norm, self.eps) if self.pre_norm else x

    def _post(self, x, norm: tuple):
        """A block's residual sum: normalised after in post-norm layers (BART)."""
        return x if self.pre_norm else layer_norm(x, norm, self.eps)


def _additive_mask(mask: torch.Tensor, dtype) -> torch.Tensor:
    """The encoder mask [R, T] as SDPA's additive mask [R, 1, 1, T]: 0 where kept, the lowest float where padded
    (HF's form: a row with no kept column stays finite)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        mask == 0, torch.finfo(dtype).min)[:, None, None, :]


def _detach(t):
    return None if t is None else t.detach()


def _norm(norm) -> tuple:
    """A layer norm's (gain, bias)."""
    return _detach(norm.weight), _detach(norm.bias)


def _linear(linear) -> tuple:
    return linear.weight.detach(), _detach(linear.bias)


def _kv_weights(attn) -> tuple:
    """An attention's k and v projections as one [2E, E] product (biases likewise), k first."""
    weight = torch.cat([attn.k_proj.weight.detach(), attn.v_proj.weight.detach()])
    bias = None if attn.k_proj.bias is None else torch.cat([attn.k_proj.bias.detach(), attn.v_proj.bias.detach()])
    return weight, bias


def _layer_weights(layer) -> tuple:
    """One decoder layer's weights as the layer function takes them: self-attention's q, k and v as one [3E, E]
    product (biases likewise), then out_proj, the cross-attention's q and out_proj, fc1, fc2, each block's norm."""
    attn, cross = layer.self_attn, layer.encoder_attn
    parts = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv_w = torch.cat([p.weight.detach() for p in parts])
    qkv_b = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    return (_norm(layer.self_attn_layer_norm), qkv_w, qkv_b, *_linear(attn.out_proj),
            _norm(layer.encoder_attn_layer_norm), *_linear(cross.q_proj), *_linear(cross.out_proj),
            _norm(layer.final_layer_norm), *_linear(layer.fc1), *_linear(layer.fc2))
