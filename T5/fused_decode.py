"""T5's and flan-T5's static-cache decoder step (`--static-cache` on `frameworks`, HF model type `t5`): the
one-token decoder step in plain torch ops, for inductor, over the fixed buffers of a `Seq2Seq.fused_step`
slot.

The layout is the decoder-only fused steps' (OPT/fused_decode.py): an embedding function, ONE layer function
called for every decoder layer with that layer's weights as arguments (same shapes, so
`torch.compile(dynamic=False)` compiles it once however deep the model is), and a head function. Each layer
function ends with the next block's first norm (the last, with the final one), so the residual add that closes a
block and the norm that opens the next are one kernel of inductor's. The encoder runs
as HF's module; `cross` turns its output into every layer's cross-attention keys and values with one product (all
layers' k and v weights concatenated at load).

What it computes, as HF's modeling_t5 does:
- T5's layer norm: root mean square only (no mean, no bias), the variance in fp32, cast back to the gain's dtype
  when that is half precision;
- self-attention with q, k and v as one product (concatenated at load), NO 1/sqrt(d) scaling of the scores, plus
  the decoder's relative position bias: layer 0's `relative_attention_bias` table [buckets, heads] looked up by
  HF's own unidirectional bucketing of the distance (write position - column), shared by every layer. Distances
  past `relative_attention_max_distance` all fall in the last bucket, so the bias is precomputed once per
  distance 0..max_distance + 1 ([heads, max_distance + 2]) and each step gathers it by the clamped distance. One
  query per row over the columns up to the write position;
- cross-attention (query projection from the cross-attention norm; keys and values from the slot; no position
  bias, no scaling) over the encoder's real columns (HF gives its padding columns the score dtype's minimum: the
  same softmax, since every encoder row has a real column; the prompt pass does as HF);
- the feed-forward: ReLU (`feed_forward_proj="relu"`, T5) or gated-GELU (`gelu_new(wi_0 x) * wi_1 x`, flan-T5,
  wi_0 and wi_1 one product); `wo`'s input cast to the residual stream's dtype, wo's own (HF keeps `wo` in fp32
  in half-precision models; `FusedSettings.half_kept_fp32` reads it from a half copy, its sums still fp32);
- HF's fp16 clamp of the hidden states after each sub-layer (max - 1000 where any value overflowed);
- the final layer norm, the d_model ** -0.5 rescale of T5's tied head (`config.scale_decoder_outputs`), the
  LM head.
Where `wo` is fp32 in a half-precision model HF's residual stream turns fp32 after the first layer's feed-forward;
ours is fp32 from the embedding on (one dtype for every call of the layer function, so it compiles once), which
differs from HF only by layer 0's half-precision roundings. The products and both attentions take the forms the
step's settings give (`Seq2Seq.fused_step.seq2seq_settings`: on CUDA our Triton GEMV for one row's products and
our attention kernels, cuBLAS for more rows; elsewhere the reduction form for one compiled row, plain-op
attention).

The decoder prompt pass is eager (F.linear and matmul attention), writing the same buffers. The concatenated
weights are copies: they are held twice while the step lives (and wo a third time, in half precision, with
`half_kept_fp32`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from CausalLM.fused_step import FusedSettings, attend, compiled, product
from NNDF.errors import UsageError
from Seq2Seq.fused_step import Seq2SeqSlot, seq2seq_slot, seq2seq_settings, write_kv

MODEL_TYPES = ("t5",)  # HF model types this step runs
ACTIVATIONS = {"relu": F.relu, "gelu_new": lambda x: F.gelu(x, approximate="tanh")}  # HF's dense_act_fn -> ours
# the feed-forwards this step reproduces: feed_forward_proj -> (gated, dense_act_fn)
FEED_FORWARDS = {"relu": (False, "relu"), "gated-gelu": (True, "gelu_new")}


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        raise UsageError(f"--static-cache: model type {config.model_type!r} has no T5 decoder step on frameworks "
                         f"(model types with one: {', '.join(MODEL_TYPES)})")
    if (config.is_gated_act, config.dense_act_fn) not in FEED_FORWARDS.values():
        raise UsageError(f"--static-cache: T5 feed-forward {config.feed_forward_proj!r} is not one the static-cache "
                         f"step implements ({', '.join(FEED_FORWARDS)}); drop --static-cache")


def rms_norm(x, weight, eps: float):
    """T5LayerNorm: x scaled by the root mean square of its last dimension (in fp32), cast to the gain's dtype
    when that is half precision, times the gain."""
    x = x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    if weight.dtype in (torch.float16, torch.bfloat16):
        x = x.to(weight.dtype)
    return weight * x


def clamp_fp16(x):
    """HF's clamp of fp16 hidden states (T5Block): to +-(max - 1000) where any value overflowed, else +-max."""
    if x.dtype != torch.float16:
        return x
    top = torch.finfo(x.dtype).max
    limit = torch.where(torch.isinf(x).any(), top - 1000, top)
    return torch.clamp(x, min=-limit, max=limit)


def attend_prompt(q, keys, values, bias):
    """Several queries q [R, H, S, D] over keys/values [R, H, L, D], no scaling, plus `bias` [.., S, L] fp32."""
    scores = torch.matmul(q.float(), keys.float().transpose(-1, -2)) + bias  # [R, H, S, L]
    return torch.matmul(torch.softmax(scores, dim=-1), values.float()).to(q.dtype)


def feed_forward(x, norm, wi, wo, eps: float, gated: bool, act: str, forms: tuple = (0, 0)):
    """T5LayerFF's residual branch: norm, wi (wi_0 and wi_1 as one product where gated), activation, wo (its input
    cast to x's dtype: HF's cast to wo's, which is the stream's, `FusedT5Step.stream`, unless wo is a half copy of
    an fp32 weight, whose product then still sums and returns fp32; the ReLU is `product`'s, which our GEMV applies
    as it loads its input). `forms`: `product`'s form for wi and wo."""
    h = product(rms_norm(x, norm, eps), wi, None, forms[0])
    if gated:
        gate, linear = h.chunk(2, dim=-1)
        h = ACTIVATIONS[act](gate) * linear
    elif act != "relu":
        h = ACTIVATIONS[act](h)
    return product(h, wo, None, forms[1], relu=not gated and act == "relu", dtype=x.dtype)


def layer_step(x, h, w: tuple, next_norm, keys, values, cross_keys, cross_values, write, encoder_last, valid,
               self_bias, cross_valid, *, heads: int, eps: float, gated: bool, act: str, forms: tuple,
               attention: tuple):
    """One T5 decoder block for one token per row: x [R, D] (h: x under the block's first norm) -> (x [R, D], x
    under `next_norm`: the next block's first norm or the final one). The norm that opens a block closes the block
    before it, so one kernel of inductor's does both the last residual add and that norm. Writes this token's K/V
    at `write` [1]. valid [R, L] (the columns up to the write position), self_bias [1, H, L] (the position bias),
    cross_valid [R, E] (the encoder's real columns, up to `encoder_last` [1]). `forms`: `product`'s form for
    q/k/v, o, the cross-attention's q and o, wi and wo; `attention`: `CausalLM.fused_step.attend`'s for the self-
    and the cross-attention (no scaling in either)."""
    _, qkv_w, o_w, norm2, cq_w, co_w, norm3, wi, wo = w
    qkv_form, o_form, cq_form, co_form, wi_form, wo_form = forms
    rows = x.shape[0]
    inner = qkv_w.shape[0] // 3
    qkv = product(h, qkv_w, None, qkv_form)
    q, k, v = (t.reshape(rows, heads, inner // heads) for t in qkv.split(inner, dim=-1))
    keys, values = write_kv(keys, values, k, v, write)
    a = attend(attention[0], q, keys, values, write, valid, 1.0, bias=self_bias).reshape(rows, inner)
    x = clamp_fp16(x + product(a, o_w, None, o_form).to(x.dtype))
    q = product(rms_norm(x, norm2, eps), cq_w, None, cq_form).reshape(rows, heads, inner // heads)
    a = attend(attention[1], q, cross_keys, cross_values, encoder_last, cross_valid, 1.0).reshape(rows, inner)
    x = clamp_fp16(x + product(a, co_w, None, co_form).to(x.dtype))
    x = clamp_fp16(x + feed_forward(x, norm3, wi, wo, eps, gated, act, (wi_form, wo_form)).to(x.dtype))
    return x, rms_norm(x, next_norm, eps)


def embed_step(ids, encoder_mask, write, embed, bias_table, norm, eps: float, length: int, stream):
    """The step's token embedding [R, D] in the residual stream's dtype and it under the first block's first norm
    `norm`, the self-attention columns it reads [R, L] (up to the write position) and their position bias
    [1, H, L] (by distance), and the encoder columns the cross-attention reads [R, E]."""
    columns = torch.arange(length, device=write.device)
    distance = (write - columns).clamp(0, bias_table.shape[1] - 1)  # [L]
    valid = (columns <= write).expand(ids.shape[0], length)
    x = embed[ids[:, 0]].to(stream)
    return x, rms_norm(x, norm, eps), valid, bias_table[:, distance].float()[None], encoder_mask != 0


def padding_bias(encoder_mask):
    """HF's additive encoder mask [R, E] in fp32: 0 at real columns, fp32's minimum at padding."""
    return (encoder_mask == 0).float() * torch.finfo(torch.float32).min


def head_step(h, lm_w, scale: float, form: int):
    """The step's logits [R, 1, V] from h, the last block's output under the final layer norm (`normed_head`)."""
    return normed_head(h, lm_w, scale, form)[:, None, :]


def head(x, norm, lm_w, eps: float, scale: float, form: int = 0):
    """Final layer norm, the tied head's rescale (scale 1.0 where there is none) and the LM head (`product`'s
    `form`): [..., D] -> [..., V]."""
    return normed_head(rms_norm(x, norm, eps), lm_w, scale, form)


def normed_head(x, lm_w, scale: float, form: int = 0):
    """`head` after its layer norm."""
    if scale != 1.0:
        x = x * scale
    return product(x.to(lm_w.dtype), lm_w, None, form)


class FusedT5Step:
    """The static-cache decoder step of a loaded HF T5 (`T5ForConditionalGeneration`): `new_slot`, `cross` (the
    cross-attention keys and values from the encoder's output), `prefill` (the decoder prompt pass) and `one_token`
    (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three functions
    with (`{}`: inductor's defaults), or None to run them eagerly; `settings`: the step's internal choices
    (`Seq2Seq.fused_step.seq2seq_settings`)."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = seq2seq_settings(settings), compile_options is not None
        self.heads, self.head_dim, self.width = config.num_heads, config.d_kv, config.d_model
        self.gated, self.act = config.is_gated_act, config.dense_act_fn
        self.scale = config.d_model ** -0.5 if _scales_head(config) else 1.0
        core = model.decoder
        self.eps = core.final_layer_norm.variance_epsilon
        self.embed = core.embed_tokens.weight.detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.bias_table = _bias_table(core.block[0].layer[0].SelfAttention, config)  # [H, max_distance + 2]
        self.final_norm, self.lm_head = core.final_layer_norm.weight.detach(), model.lm_head.weight.detach()
        self.layers = [_layer_weights(block, self.gated) for block in core.block]
        # the norm each block's output goes under: the next block's first, the last block's the final one
        self.next_norms = [w[0] for w in self.layers[1:]] + [self.final_norm]
        # the residual stream: fp32 where HF keeps `wo` in fp32 (its stream turns fp32 after the first wo)
        self.stream = torch.promote_types(self.dtype, self.layers[0][-1].dtype)
        # the one-token step's weights where wo's product runs our GEMV or the reduction form (`half_kept_fp32`):
        # wo from a half copy where HF keeps it in fp32 (F.linear needs one dtype: the prompt pass and cuBLAS keep
        # HF's own)
        self.half_wo_layers = self.layers
        if self.settings.half_kept_fp32 and self.stream != self.dtype:
            self.half_wo_layers = [w[:-1] + (w[-1].to(self.dtype),) for w in self.layers]
        self.cross_kv = torch.cat([torch.cat([b.layer[1].EncDecAttention.k.weight, b.layer[1].EncDecAttention.v.weight])
                                   for b in core.block]).detach()  # [layers * 2 * inner, D]
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        """Empty buffers [rows, heads, max_length or encoder_length, d_kv] per layer (`seq2seq_slot`)."""
        return seq2seq_slot(rows, max_length, encoder_length, len(self.layers), self.heads, self.head_dim,
                            self.dtype, self.device)

    def cross(self, hidden: torch.Tensor, slot: Seq2SeqSlot) -> None:
        """Every layer's cross-attention K and V from the encoder's output hidden [R, E, D], in one product."""
        rows, length = hidden.shape[:2]
        kv = F.linear(hidden.to(self.cross_kv.dtype), self.cross_kv)  # [R, E, layers * 2 * inner]
        kv = kv.reshape(rows, length, len(slot.cross), self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        for buffer, part in zip(slot.cross, kv):  # part [R, H, E, d_kv]
            buffer.copy_(part)

    def one_token(self, slot: Seq2SeqSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids` at decoder position `slot.write`, its K/V written there."""
        rows, settings = slot.rows, self.settings
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[1], w[2], w[4], w[5], w[7], w[8])
        attention = (settings.attention_on(self.device, slot.max_length, self.head_dim, rows=rows),
                     settings.attention_on(self.device, slot.encoder_length, self.head_dim, rows=rows))
        layers = self.half_wo_layers if forms[-1] else self.layers  # wo through F.linear (form 0): HF's own
        x, h, valid, self_bias, cross_valid = self._embed(slot.ids, slot.encoder_mask, slot.write, self.embed,
                                                          self.bias_table, self.layers[0][0], eps=self.eps,
                                                          length=slot.max_length, stream=self.stream)
        past = slot.layer_buffers(settings.paired_kv_write)
        for weights, next_norm, keys, values, cross_keys, cross_values in zip(layers, self.next_norms, *past,
                                                                             slot.cross[0::2], slot.cross[1::2]):
            x, h = self._layer(x, h, weights, next_norm, keys, values, cross_keys, cross_values, slot.write,
                               slot.encoder_last, valid, self_bias, cross_valid, heads=self.heads, eps=self.eps,
                               gated=self.gated, act=self.act, forms=forms, attention=attention)
        return self._head(h, self.lm_head, scale=self.scale,
                          form=settings.head_form(rows, self.compiled, self.width, self.device))

    def prefill(self, input_ids: torch.Tensor, slot: Seq2SeqSlot, last_only: bool) -> torch.Tensor:
        """The decoder prompt pass, eager: input_ids [R, S] at decoder positions 0..S-1, their K/V written to
        columns 0..S-1; logits [R, S, V] ([R, 1, V] when `last_only`)."""
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device)
        distance = (positions[:, None] - positions[None, :]).clamp(0, self.bias_table.shape[1] - 1)  # [S, S]
        self_bias = self.bias_table[:, distance].float().masked_fill(positions[None, :] > positions[:, None],
                                                                     float("-inf"))  # [H, S, S]
        cross_bias = padding_bias(slot.encoder_mask)[:, None, None, :]  # [R, 1, 1, E]
        x = self.embed[input_ids].to(self.stream)
        for weights, keys, values, cross_keys, cross_values in zip(self.layers, slot.past[0::2], slot.past[1::2],
                                                                   slot.cross[0::2], slot.cross[1::2]):
            x = self._prompt_layer(x, weights, keys, values, cross_keys, cross_values, self_bias, cross_bias)
        if last_only:
            x = x[:, -1:]
        return head(x, self.final_norm, self.lm_head, self.eps, self.scale)

    def _prompt_layer(self, x, w: tuple, keys, values, cross_keys, cross_values, self_bias, cross_bias):
        """One decoder block over the prompt x [R, S, D]: its K/V written to columns 0..S-1."""
        norm1, qkv_w, o_w, norm2, cq_w, co_w, norm3, wi, wo = w
        rows, length, _ = x.shape
        inner = qkv_w.shape[0] // 3

        def split(t):  # [R, S, inner] -> [R, H, S, d_kv]
            return t.reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)

        def merge(t):  # [R, H, S, d_kv] -> [R, S, inner]
            return t.transpose(1, 2).reshape(rows, length, inner)

        q, k, v = (split(t) for t in F.linear(rms_norm(x, norm1, self.eps), qkv_w).split(inner, dim=-1))
        keys[:, :, :length] = k
        values[:, :, :length] = v
        a = attend_prompt(q, keys[:, :, :length], values[:, :, :length], self_bias)
        x = clamp_fp16(x + F.linear(merge(a), o_w).to(x.dtype))
        q = split(F.linear(rms_norm(x, norm2, self.eps), cq_w))
        x = clamp_fp16(x + F.linear(merge(attend_prompt(q, cross_keys, cross_values, cross_bias)), co_w).to(x.dtype))
        ff = feed_forward(x, norm3, wi, wo, self.eps, self.gated, self.act)
        return clamp_fp16(x + ff.to(x.dtype))


def _scales_head(config) -> bool:
    """Whether HF rescales the decoder's output by d_model ** -0.5 before the LM head (T5's tied head; flan-T5's
    untied one is not): `scale_decoder_outputs` in transformers 5, `tie_word_embeddings` before it."""
    return bool(getattr(config, "scale_decoder_outputs", config.tie_word_embeddings))


def _bias_table(attention, config) -> torch.Tensor:
    """The decoder's relative position bias by distance (write position - column) 0..max_distance + 1,
    [H, max_distance + 2]: HF's own unidirectional bucketing (every larger distance falls in the last bucket, as
    this one does)."""
    table = attention.relative_attention_bias.weight.detach()  # [buckets, H]
    distance = torch.arange(config.relative_attention_max_distance + 2, device=table.device)
    buckets = attention._relative_position_bucket(-distance, bidirectional=False,
                                                  num_buckets=config.relative_attention_num_buckets,
                                                  max_distance=config.relative_attention_max_distance)
    return table[buckets].t().contiguous()


def _layer_weights(block, gated: bool) -> tuple:
    """One decoder block's weights as the layer function takes them: its three norms' gains, q/k/v as one [3 inner, D]
    product, o, the cross-attention's q and o, wi (wi_0 and wi_1 as one [2 d_ff, D] where gated) and wo."""
    attn, cross, ff = block.layer[0], block.layer[1], block.layer[2]
    a, c, dense = attn.SelfAttention, cross.EncDecAttention, ff.DenseReluDense
    qkv_w = torch.cat([a.q.weight, a.k.weight, a.v.weight])
    wi = torch.cat([dense.wi_0.weight, dense.wi_1.weight]) if gated else dense.wi.weight
    return tuple(t.detach() for t in (attn.layer_norm.weight, qkv_w, a.o.weight, cross.layer_norm.weight, c.q.weight,
                                      c.o.weight, ff.layer_norm.weight, wi, dense.wo.weight))
