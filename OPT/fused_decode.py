"""OPT's fused decode step (`--fused-decode` on `frameworks`, HF model type `opt`): the one-token step in plain
torch ops, for inductor, over our own static cache.

The layout is the other fused steps' (GPT2/fused_decode.py, LLAMA/fused_decode.py): an embedding function, ONE
layer function called for every layer with that layer's weights as arguments (same shapes, so
`torch.compile(dynamic=False)` compiles it once however deep the model is), and a head function; the cache is one
K and one V buffer [rows, heads, length, head_dim] per layer, written in place at a write position held on the
device, so the step replays from a CUDA graph without host work (the capture is `CausalLM.torch_steps.TorchSteps`'s).

What it computes, as HF's modeling code does: the token embedding (through `project_in` where the embedding is
narrower than the model, opt-350m) plus a learned position embedding at position + 2 (the positions are the ones
the loop passes, which skip left padding); per layer a layer norm before attention and before the MLP
(`do_layer_norm_before`), or after each residual add (opt-350m's post-norm); one product for q, k and v (the three
weights and biases concatenated once at load), the query scaled by head_dim ** -0.5, attention of the one query
over the whole buffer masked by (column <= write position) and the row's padding mask, out_proj, fc1, ReLU, fc2;
the final layer norm (pre-norm models only), `project_out` where present, and the tied LM head. On CUDA a one-row
step's products and its attention run our Triton kernels (`NNDF.backends.torch.kernels`); elsewhere, and for
more rows, products of few rows in narrow models use the reduction form when compiled
(`CausalLM.fused_step.product`), cuBLAS otherwise (`FusedSettings`, `decoder_settings`).

The prompt pass (left-padded rows) is eager: F.linear and SDPA with a causal + padding mask, writing the same
buffers. The concatenated q/k/v weights are copies: they are held twice while the step lives.
"""
from __future__ import annotations


import torch
import torch.nn.functional as F

from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot,
                                 layer_norm, product, prompt_mask)
from NNDF.errors import UsageError
from NNDF.slots import KVSlot

MODEL_TYPES = ("opt",)  # HF model types this step runs
POSITION_OFFSET = 2  # OPT's learned position table starts two rows in (HF's OPTLearnedPositionalEmbedding.offset)


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    check_model_type(config, MODEL_TYPES)
    if config.activation_function != "relu":
        raise UsageError(f"--fused-decode: activation {config.activation_function!r} is not the ReLU the fused "
                         "step implements; drop --fused-decode")


def layer_step(x, w: tuple, keys, values, write, valid, *, heads: int, eps: float, scale: float, pre_norm: bool,
               forms: tuple, attention: str, fuse: bool = False):
    """One OPT decoder layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    `forms`: `product`'s form for q/k/v, out_proj, fc1 and fc2; `attention`: `attend`'s; `fuse` (pre-norm layers
    with both norms' gains and biases): the norms, the ReLU, the residual adds and the K/V writes inside our GEMV
    where it runs a product (`product`; otherwise the same ops around it)."""
    norm1, qkv_w, qkv_b, out_w, out_b, norm2, fc1_w, fc1_b, fc2_w, fc2_b = w
    qkv_form, out_form, fc1_form, fc2_form = forms
    rows, embed = x.shape
    head_dim = embed // heads
    # pre-norm: each norm before its product; post-norm: after the residual adds
    before1, before2 = (("layer", *norm1, eps), ("layer", *norm2, eps)) if pre_norm else (None, None)
    qkv = product(x, qkv_w, qkv_b, qkv_form, norm=before1, cache=(keys, values, write, embed), fuse=fuse)
    a = attend(attention, qkv[:, :embed].reshape(rows, heads, head_dim), keys, values, write, valid, scale)
    x = product(a.reshape(rows, embed), out_w, out_b, out_form, residual=x, fuse=fuse)
    if not pre_norm:
        x = layer_norm(x, norm1, eps)
    h = product(x, fc1_w, fc1_b, fc1_form, norm=before2, fuse=fuse)
    x = product(h, fc2_w, fc2_b, fc2_form, relu=True, residual=x, fuse=fuse)
    return x if pre_norm else layer_norm(x, norm2, eps)


def embed_step(ids, positions, mask, write, embed, project_in, pos_table, form: int):
    """The step's token + position embedding [R, E], and which columns each row attends to [R, L]."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)
    x = embed[ids[:, 0]]
    if project_in is not None:
        x = product(x, project_in, None, form)
    return x + pos_table[positions[:, 0] + POSITION_OFFSET], valid


def head_step(x, norm: tuple | None, project_out, lm_w, eps: float, forms: tuple):
    """The step's logits [R, 1, V] (`head`)."""
    return head(x, norm, project_out, lm_w, eps, forms)[:, None, :]


def head(x, norm: tuple | None, project_out, lm_w, eps: float, forms: tuple = (0, 0)):
    """Final layer norm (pre-norm models), project_out (where present) and the LM head: [..., E] -> [..., V].
    `forms`: `product`'s form for project_out and the LM head."""
    if norm is not None:
        x = layer_norm(x, norm, eps)
    if project_out is not None:
        x = product(x, project_out, None, forms[0])
    return product(x, lm_w, None, forms[1])


class FusedOPTStep:
    """The fused step of a loaded HF OPT (`OPTForCausalLM`): `new_slot`, `prefill` (the prompt pass) and
    `one_token` (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three
    functions with (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.heads, self.pre_norm = config.num_attention_heads, config.do_layer_norm_before
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.width, self.scale = config.hidden_size, self.head_dim ** -0.5
        core = model.model.decoder
        self.eps = core.layers[0].self_attn_layer_norm.eps
        self.embed = core.embed_tokens.weight.detach()
        self.positions = core.embed_positions.weight.detach()
        self.project_in, self.project_out = _weight(core.project_in), _weight(core.project_out)
        self.final_norm = None if core.final_layer_norm is None else _norm(core.final_layer_norm)
        self.lm_head = model.lm_head.weight.detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.layers = [_layer_weights(layer) for layer in core.layers]
        # the norms' fusion into our GEMV takes gains and biases (every OPT checkpoint has them)
        self.affine = all(t is not None for t in (*self.layers[0][0], *self.layers[0][5]))
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), its buffers [rows, heads, max_length, head_dim]."""
        return kv_slot(rows, max_length, len(self.layers), self.heads, self.head_dim, self.dtype, self.device)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        rows, settings = slot.rows, self.settings
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[1], w[3], w[6], w[8])
        project_in, project_out = settings.forms(rows, self.compiled, self.width, self.device, self.project_in,
                                                 self.project_out)
        head_form = settings.head_form(rows, self.compiled, self.width, self.device)
        attention = settings.attention_on(self.device, slot.max_length, self.head_dim)
        x, valid = self._embed(slot.ids, slot.positions, slot.mask, slot.write, self.embed, self.project_in,
                               self.positions, form=project_in)
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._layer(x, weights, keys, values, slot.write, valid, heads=self.heads, eps=self.eps,
                            scale=self.scale, pre_norm=self.pre_norm, forms=forms, attention=attention,
                            fuse=settings.fuses("opt") and self.pre_norm and self.affine)
        return self._head(x, self.final_norm, self.project_out, self.lm_head, eps=self.eps,
                          forms=(project_out, head_form))

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass, eager: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far].
        Each query sees the columns up to its own that the mask keeps, and always itself (a padding row's query
        then stays finite, so later layers' K/V at padding columns do too)."""
        start = mask.shape[1] - input_ids.shape[1]
        allowed = prompt_mask(mask, input_ids.shape[1])  # [R, 1, S, total]
        x = self.embed[input_ids]
        if self.project_in is not None:
            x = F.linear(x, self.project_in)
        x = x + self.positions[position_ids + POSITION_OFFSET]
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._prompt_layer(x, weights, keys, values, start, allowed)
        if last_only:
            x = x[:, -1:]
        return head(x, self.final_norm, self.project_out, self.lm_head, self.eps)

    def _prompt_layer(self, x, w: tuple, keys, values, start: int, allowed):
        norm1, qkv_w, qkv_b, out_w, out_b, norm2, fc1_w, fc1_b, fc2_w, fc2_b = w
        rows, length, embed = x.shape
        qkv = F.linear(layer_norm(x, norm1, self.eps) if self.pre_norm else x, qkv_w, qkv_b)
        q, k, v = (t.reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)
                   for t in qkv.split(embed, dim=-1))
        end = start + length
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed,
                                           scale=self.scale)
        x = x + F.linear(a.transpose(1, 2).reshape(rows, length, embed), out_w, out_b)
        if not self.pre_norm:
            x = layer_norm(x, norm1, self.eps)
        h = F.relu(F.linear(layer_norm(x, norm2, self.eps) if self.pre_norm else x, fc1_w, fc1_b))
        x = x + F.linear(h, fc2_w, fc2_b)
        return x if self.pre_norm else layer_norm(x, norm2, self.eps)


def _weight(linear) -> torch.Tensor | None:
    """A bias-free projection's weight [out, in] (opt-350m's project_in/project_out), or None where absent."""
    return None if linear is None else linear.weight.detach()


def _detach(t):
    return None if t is None else t.detach()


def _norm(norm) -> tuple:
    """A layer norm's (gain, bias), each None without elementwise affine."""
    return _detach(norm.weight), _detach(norm.bias)


def _layer_weights(layer) -> tuple:
    """One layer's weights as the layer function takes them: q, k and v as one [3E, E] product (biases likewise)."""
    attn = layer.self_attn
    parts = (attn.q_proj, attn.k_proj, attn.v_proj)
    qkv_w = torch.cat([p.weight.detach() for p in parts])
    qkv_b = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    return (_norm(layer.self_attn_layer_norm), qkv_w, qkv_b, attn.out_proj.weight.detach(),
            _detach(attn.out_proj.bias), _norm(layer.final_layer_norm), layer.fc1.weight.detach(),
            _detach(layer.fc1.bias), layer.fc2.weight.detach(), _detach(layer.fc2.bias))
