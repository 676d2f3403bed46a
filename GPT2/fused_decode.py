"""GPT-2's fused decode step (`--fused-decode` on `frameworks`): the one-token step in plain torch ops, for inductor.

HF's modeling code runs ~150 small kernels per GPT-2 step; this step is written so that inductor can fuse the
work around each weight product into its neighbours. The step is three functions: the embedding (token + position,
and the row's attention validity), ONE layer function called for every layer with that layer's weights as
arguments (same shapes, so `torch.compile(dynamic=False)` compiles it once: gpt2-xl's 48 layers compile as fast as
12), and the head (final layer norm + tied LM head). The cache is our own: one K and one V buffer
[rows, heads, length, head_dim] per layer, written in place at a write position held on the device, so the step
replays from a CUDA graph without host work (the capture is `CausalLM.torch_steps.TorchSteps`'s).

The step's choices are `CausalLM.fused_step.FusedSettings` (the decoder families' default,
`decoder_settings`): on CUDA a one-row step's products (the LM head included) run our Triton GEMV kernel and the
one-query attention our Triton kernel (`NNDF.backends.torch.kernels`); elsewhere, and for more rows, products
of few rows take the reduction form `(x[:, None, :] * W).sum(-1)` when compiled, which inductor fuses with its
prologue (layer norm) and epilogue (bias, GELU, residual), and `F.linear` (cuBLAS) otherwise; the attention reads
the whole static buffer masked by (column <= write position) & the row's padding mask, as plain ops inductor
fuses or as `F.scaled_dot_product_attention`. With `gemv_fusion` (GPT-2's default) our GEMV also applies the layer
norms and the GELU to its input, adds the residual and writes the K/V buffers: five kernels a layer (the q/k/v
product, the attention, three products). `fold_norms` folds each layer norm's gain into the product that
follows it.

The prompt pass (left-padded rows) is eager: `F.linear` and SDPA with a causal + padding mask, writing the same
buffers. Weights are the loaded HF model's own tensors (Conv1D weights [in, out] transposed once to [out, in]:
a copy, so the layers' weights are held twice while the step lives).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from GPT2.config import FUSED_GELUS
from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot, product,
                                 prompt_mask)
from NNDF.slots import KVSlot, write_kv_columns
from NNDF.errors import UsageError

MODEL_TYPES = ("gpt2",)  # HF model types this step runs
ACTIVATIONS = FUSED_GELUS  # activation_function -> F.gelu's `approximate`


def check_config(config) -> None:
    """Refuse, in one line, a GPT-2 config this step does not reproduce."""
    refusals = {
        "scale_attn_by_inverse_layer_idx": "scale_attn_by_inverse_layer_idx",
        "reorder_and_upcast_attn": "reorder_and_upcast_attn",
        "add_cross_attention": "cross attention (add_cross_attention)",
    }
    check_model_type(config, MODEL_TYPES)
    for field, what in refusals.items():
        if getattr(config, field, False):
            raise UsageError(f"--fused-decode: this GPT-2 config sets {what}, which the fused step does not "
                             "implement; drop --fused-decode")
    if config.activation_function not in ACTIVATIONS:
        raise UsageError(f"--fused-decode: activation {config.activation_function!r} is not one the fused step "
                         f"implements ({', '.join(ACTIVATIONS)}); drop --fused-decode")


def _norm_product(x, norm: tuple, weight, bias, eps: float, form: int, folded: bool, fuse: bool = False,
                  cache: tuple | None = None):
    """layer_norm(x) times the weight + bias (`product`'s `form`; with `fuse`, the norm inside our GEMV; `cache`:
    `product`'s). `norm` is the norm's (gain, bias), or when `folded` (`fold_norm`) the weight's (row sums,
    constant) with `bias` None: y = rstd * (x.W' - mean * rowsum) + constant, x's sum and sum of squares reduced
    over the same range as the product (in the reduction form: one kernel)."""
    if not folded:
        return product(x, weight, bias, form, norm=("layer", *norm, eps), fuse=fuse, cache=cache)
    rowsum, const = norm
    xf = x.float()
    if form == 1:
        wide = xf[..., None, :].expand(*xf.shape[:-1], weight.shape[0], xf.shape[-1])
        total, squares = wide.sum(-1), (wide * wide).sum(-1)
        dot = (xf[..., None, :] * weight.float()).sum(-1)
    else:
        total, squares = xf.sum(-1, keepdim=True), (xf * xf).sum(-1, keepdim=True)
        dot = product(x, weight, None, form).float()
    mean = total / x.shape[-1]
    rstd = torch.rsqrt(squares / x.shape[-1] - mean * mean + eps)
    out = (rstd * (dot - mean * rowsum) + const).to(x.dtype)
    if cache is not None:
        write_kv_columns(out, *cache)
    return out


def fold_norm(gain, shift, weight, bias) -> tuple:
    """W * gain [out, in] in W's dtype, and (its row sums, W @ shift + bias) in fp32."""
    folded = (weight.float() * gain.float()).to(weight.dtype)
    const = weight.float() @ shift.float() + (0 if bias is None else bias.float())
    return folded, (folded.float().sum(-1), const)


def layer_step(x, w: tuple, keys, values, write, valid, *, heads: int, eps: float, gelu: str, scale: float,
               forms: tuple, attention: str, folded: bool, fuse: bool = False):
    """One GPT-2 block for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    `forms`: `product`'s form for c_attn, attn.c_proj, c_fc and mlp.c_proj; `attention`: `attend`'s; `fuse`:
    the norms, the GELU, the residual adds and the K/V writes inside our GEMV where it runs a product
    (`product`)."""
    norm1, qkv_w, qkv_b, proj_w, proj_b, norm2, fc_w, fc_b, out_w, out_b = w
    qkv_form, proj_form, fc_form, out_form = forms
    rows, embed = x.shape
    qkv = _norm_product(x, norm1, qkv_w, qkv_b, eps, qkv_form, folded, fuse, cache=(keys, values, write, embed))
    q = qkv[:, :embed].reshape(rows, heads, embed // heads)
    a = attend(attention, q, keys, values, write, valid, scale).reshape(rows, embed)
    x = product(a, proj_w, proj_b, proj_form, residual=x, fuse=fuse)
    h = _norm_product(x, norm2, fc_w, fc_b, eps, fc_form, folded, fuse)
    return product(h, out_w, out_b, out_form, activation=gelu, residual=x, fuse=fuse)


def embed_step(ids, positions, mask, write, wte, wpe):
    """Token + position embedding of the step's token [R, E], and which columns each row attends to [R, L]."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)
    return token_embed(ids, positions, wte, wpe), valid


def token_embed(ids, positions, wte, wpe):
    """Token + position embedding of the step's token [R, E]."""
    return wte[ids[:, 0]] + wpe[positions[:, 0]]


def head_step(x, norm: tuple, lm_w, eps: float, form: int, folded: bool):
    """Final layer norm and LM head: logits [R, 1, V]. (The norm stays a kernel of its own, not inside our GEMV:
    every one of the head's ~12k programs would compute its statistics again.)"""
    return _norm_product(x, norm, lm_w, None, eps, form, folded)[:, None, :]


class FusedGPT2Step:
    """The fused step of a loaded HF GPT-2 (`GPT2LMHeadModel`): `new_slot`, `prefill` (the prompt pass) and
    `one_token` (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three
    functions with (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.heads, self.eps = config.n_head, config.layer_norm_epsilon
        self.head_dim = config.n_embd // config.n_head
        self.scale = 1.0 / math.sqrt(self.head_dim) if config.scale_attn_weights else 1.0
        self.gelu = ACTIVATIONS[config.activation_function]
        core = model.transformer
        self.wte, self.wpe = core.wte.weight.detach(), core.wpe.weight.detach()
        self.folded = self.settings.fold_norms
        self.ln_f = (core.ln_f.weight.detach(), core.ln_f.bias.detach())
        self.lm_head = model.lm_head.weight.detach()
        if self.folded:  # a folded copy of the LM head (the embedding keeps the tied original)
            self.lm_head, self.ln_f = fold_norm(*self.ln_f, self.lm_head, None)
        self.layers = [_block_weights(block, self.settings.fold_norms) for block in core.h]
        self.dtype, self.device = self.wte.dtype, self.wte.device
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), one K and one V buffer per layer."""
        return kv_slot(rows, max_length, len(self.layers), self.heads, self.head_dim, self.dtype, self.device)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        rows, settings, width = slot.rows, self.settings, self.wte.shape[1]
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, width, self.device, w[1], w[3], w[6], w[8])
        attention = settings.attention_on(self.device, slot.max_length, self.head_dim)
        x, valid = self._embed(slot.ids, slot.positions, slot.mask, slot.write, self.wte, self.wpe)
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._layer(x, weights, keys, values, slot.write, valid, heads=self.heads, eps=self.eps,
                            gelu=self.gelu, scale=self.scale, forms=forms, attention=attention, folded=self.folded,
                            fuse=settings.fuses("gpt2"))
        head = settings.head_form(rows, self.compiled, width, self.device)
        return self._head(x, self.ln_f, self.lm_head, eps=self.eps, form=head, folded=self.folded)

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass, eager: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far].
        Each query sees the columns up to its own that the mask keeps, and always itself (a padding row's query
        then stays finite, so later layers' K/V at padding columns do too)."""
        start = mask.shape[1] - input_ids.shape[1]
        allowed = prompt_mask(mask, input_ids.shape[1])  # [R, 1, S, total]
        x = self.wte[input_ids] + self.wpe[position_ids]
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._prompt_layer(x, weights, keys, values, start, allowed)
        if last_only:
            x = x[:, -1:]
        return _norm_product(x, self.ln_f, self.lm_head, None, self.eps, 0, self.folded)

    def _prompt_layer(self, x, w: tuple, keys, values, start: int, allowed):
        norm1, qkv_w, qkv_b, proj_w, proj_b, norm2, fc_w, fc_b, out_w, out_b = w
        rows, length, embed = x.shape
        qkv = _norm_product(x, norm1, qkv_w, qkv_b, self.eps, 0, self.folded)
        q, k, v = (t.reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)
                   for t in qkv.split(embed, dim=-1))
        end = start + length
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed,
                                           scale=self.scale)
        x = x + F.linear(a.transpose(1, 2).reshape(rows, length, embed), proj_w, proj_b)
        h = F.gelu(_norm_product(x, norm2, fc_w, fc_b, self.eps, 0, self.folded), approximate=self.gelu)
        return x + F.linear(h, out_w, out_b)


def _normed(norm, conv, fold: bool) -> tuple:
    """(norm, weight [out, in], bias) of a product that follows a layer norm, folded or not."""
    weight, bias = conv.weight.detach().t().contiguous(), conv.bias.detach()
    if not fold:
        return (norm.weight.detach(), norm.bias.detach()), weight, bias
    folded, sums = fold_norm(norm.weight.detach(), norm.bias.detach(), weight, bias)
    return sums, folded, None


def _block_weights(block, fold: bool) -> tuple:
    """One block's weights as the layer function takes them; HF's Conv1D stores [in, out]: transposed once."""
    attn, mlp = block.attn, block.mlp
    plain = lambda conv: (conv.weight.detach().t().contiguous(), conv.bias.detach())  # noqa: E731
    return (*_normed(block.ln_1, attn.c_attn, fold), *plain(attn.c_proj), *_normed(block.ln_2, mlp.c_fc, fold),
            *plain(mlp.c_proj))
