"""The LLAMA family's fused decode step (`--fused-decode` on `frameworks`): Llama, Mistral, Qwen2, Qwen3 and Phi-3's
one-token step in plain torch ops, for inductor, over our own static cache.

The layout is GPT-2's fused step's (GPT2/fused_decode.py): an embedding function, ONE layer function called for
every layer with that layer's weights as arguments (same shapes, so `torch.compile(dynamic=False)` compiles it
once however deep the model is), and a head function; the cache is one K and one V buffer
[rows, key/value heads, length, head_dim] per layer, written in place at a write position held on the device, so
the step replays from a CUDA graph without host work (the capture is `CausalLM.torch_steps.TorchSteps`'s).

What the layer computes, as HF's modeling code does: RMSNorm (in fp32, the gain applied in the model's dtype),
one product for q, k and v (the three weights concatenated once at load; Qwen2's biases with them; Phi-3's
`qkv_proj` as stored), Qwen3's RMS norm of each query and key head, rotary positions from a cos/sin table that HF's
own rotary module computes once for every position (so rope_theta and the rope scalings whose frequencies do not
depend on the sequence length are exact: default, linear, llama3, yarn; dynamic and longrope are refused),
grouped-query attention of the one query over the whole buffer masked by (column <= write position), the row's
padding mask and, for sliding-window models (Mistral, Phi-3), column > write position - window, then o_proj,
RMSNorm, one product for gate and up (Phi-3's `gate_up_proj` as stored), SiLU(gate) * up, down. On CUDA, a
one-row step's products (the LM head included) run our Triton GEMV kernel and the attention our Triton kernel
(`NNDF.backends.torch.kernels`); elsewhere the products take the reduction form when compiled in narrow models
with few rows (`CausalLM.fused_step.product`), cuBLAS otherwise.
`FusedSettings` holds the other choices the device benchmark compares (defaults measured fastest or level,
docs/PERFORMANCE.md): a long sum such as down's split in parts, SDPA for the attention, V buffers stored
[.., head_dim, length], the RMSNorm statistics summed inside the next product.

The prompt pass (left-padded rows): F.linear and SDPA with a causal + padding (+ window) mask, writing the same
buffers; one layer function (`prompt_layer`) for every layer, compiled for any prompt length where the step is
compiled on CUDA (`CausalLM.fused_step.prompt_function`), eager elsewhere. The concatenated q/k/v and gate/up
weights are copies: those layers' weights are held twice while the step lives.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from CausalLM.fused_step import (FusedSettings, attend, check_model_type, compiled, decoder_settings, kv_slot, product,
                                 prompt_function, prompt_mask, rms_norm)
from LLAMA import attention
from LLAMA.config import FUSED_TYPES
from NNDF.errors import UsageError
from NNDF.slots import KVSlot

MODEL_TYPES = FUSED_TYPES  # HF model types this step runs


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    check_model_type(config, MODEL_TYPES)
    if config.hidden_act != "silu":
        raise UsageError(f"--fused-decode: activation {config.hidden_act!r} is not the SiLU the fused step "
                         "implements; drop --fused-decode")
    if getattr(config, "mlp_bias", False):
        raise UsageError("--fused-decode: this config sets mlp_bias, which the fused step does not implement; "
                         "drop --fused-decode")
    attention.check_fixed_rope(config)


def sliding_window(config) -> int | None:
    """The attention window of a sliding-window model (every layer: Mistral, Phi-3), else None."""
    windows = set(attention.layer_windows(config))
    if len(windows) > 1:
        raise UsageError("--fused-decode: this config mixes sliding-window and full-attention layers, which the "
                         "fused step does not implement; drop --fused-decode")
    return windows.pop()


def norm_product(x, gain, weight, bias, eps: float, form: int, fold: bool, fuse: bool = False):
    """rms_norm(x) times the weight + bias (`product`; with `fuse`, the norm inside our GEMV). `fold`, in the
    one-reduction form: the norm's sum of squares summed beside the product over the same features, out =
    rsqrt(mean(x^2) + eps) * ((x * gain) . W), so inductor makes one kernel of both (the statistics are repeated per
    output: free beside the weight reads)."""
    if not (fold and form == 1):
        if fuse:
            return product(x, weight, bias, form, norm=("rms", gain, None, eps))
        return product(rms_norm(x, gain, eps), weight, bias, form)
    xf = x.float()
    out = ((xf * gain.float())[..., None, :] * weight.float()).sum(-1)  # [..., out]
    squares = (xf * xf)[..., None, :].expand(*out.shape, xf.shape[-1]).sum(-1)  # the same sum for every output
    out = out * torch.rsqrt(squares / xf.shape[-1] + eps)
    return (out if bias is None else out + bias.float()).to(x.dtype)


def rotate(x, cos, sin):
    """HF's rotary positions on the first cos.shape[-1] features of x [R, heads, S, D] (the rest pass through:
    partial rotary), cos/sin [R, 1, S, rot]."""
    rot = cos.shape[-1]
    x_rot = x[..., :rot] if rot < x.shape[-1] else x
    half = rot // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    out = x_rot * cos + rotated * sin
    return out if rot == x.shape[-1] else torch.cat((out, x[..., rot:]), dim=-1)


def queries_keys(qkv, heads: int, kv_heads: int, head_dim: int, qk_norm, eps: float, cos, sin, norm=rms_norm):
    """The queries [R, heads, S, D] and keys [R, kv heads, S, D] of a q/k/v product qkv [R, S, (heads + 2 kv heads)
    D], as HF's layers make them: each head RMS-normed by `norm` where the layer norms them (`qk_norm` [heads + kv
    heads, D]: Qwen3's and Gemma 3's q_norm gain on every query head, then k_norm's on every key head; None: as
    they are), then rotated (cos/sin [R, 1, S, rot]). Queries and keys go through each op together (one launch
    each, not two: the eager prompt pass waits on the host's launches), which gives each element what the two ops
    apart give."""
    rows, length = qkv.shape[:2]
    qk = qkv[..., :(heads + kv_heads) * head_dim].reshape(rows, length, heads + kv_heads, head_dim)
    if qk_norm is not None:
        qk = norm(qk, qk_norm, eps)
    qk = rotate(qk.transpose(1, 2), cos, sin)
    return qk[:, :heads], qk[:, heads:]


def layer_step(x, w: tuple, keys, values, write, valid, cos, sin, *, heads: int, kv_heads: int, eps: float,
               scale: float, forms: tuple, attention: str = "reduction", transposed: bool = False,
               fold: bool = False, window: int | None = None, fuse: bool = False):
    """One decoder layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    `forms`: `product`'s form for q/k/v, o_proj, gate/up and down; `attention`: `attend`'s; `transposed`: V
    buffers [R, KVH, D, L]; `fold`: norms folded into their products (`norm_product`); `fuse`: the norms, SwiGLU
    and the residual adds inside our GEMV where it runs a product (`product`)."""
    norm1, qkv_w, qkv_b, qk_norm, o_w, o_b, norm2, gate_up_w, down_w = w
    qkv_form, o_form, gate_up_form, down_form = forms
    rows = x.shape[0]
    head_dim = keys.shape[-1]
    qkv = norm_product(x, norm1, qkv_w, qkv_b, eps, qkv_form, fold, fuse)
    q, k = queries_keys(qkv[:, None], heads, kv_heads, head_dim, qk_norm, eps, cos, sin)
    q = q[:, :, 0]
    v = qkv[:, (heads + kv_heads) * head_dim:]
    keys[:, :, write] = k
    if transposed:
        values[:, :, :, write] = v.reshape(rows, kv_heads, head_dim, 1)
    else:
        values[:, :, write] = v.reshape(rows, kv_heads, 1, head_dim)
    a = attend(attention, q, keys, values, write, valid, scale, transposed, window)
    a = a.reshape(rows, heads * head_dim)
    x = product(a, o_w, o_b, o_form, residual=x, fuse=fuse)
    gate_up = norm_product(x, norm2, gate_up_w, None, eps, gate_up_form, fold, fuse)
    return product(gate_up, down_w, None, down_form, activation="swiglu", residual=x, fuse=fuse)


def prompt_layer(x, w: tuple, keys, values, start: int, allowed, cos, sin, *, heads: int, kv_heads: int,
                 eps: float, scale: float, transposed: bool = False):
    """One decoder layer of the prompt pass: x [R, S, E] -> [R, S, E] at columns start.. of the buffers, whose K/V
    it writes; `allowed` [R, 1, S, total] the columns each query sees, cos/sin [R, 1, S, rot]; `transposed`: V
    buffers [R, KVH, D, L]."""
    norm1, qkv_w, qkv_b, qk_norm, o_w, o_b, norm2, gate_up_w, down_w = w
    rows, length, _ = x.shape
    d = keys.shape[-1]
    qkv = F.linear(rms_norm(x, norm1, eps), qkv_w, qkv_b)
    q, k = queries_keys(qkv, heads, kv_heads, d, qk_norm, eps, cos, sin)
    end = start + length
    keys[:, :, start:end] = k
    v = qkv[..., (heads + kv_heads) * d:].reshape(rows, length, kv_heads, d).transpose(1, 2)  # [R, KVH, S, D]
    if transposed:
        values[:, :, :, start:end] = v.transpose(2, 3)
        values = values[..., :end].transpose(2, 3).contiguous()  # [R, KVH, end, D]: SDPA's kernels want D dense
    else:
        values[:, :, start:end] = v
    a = F.scaled_dot_product_attention(q, keys[:, :, :end], values[:, :, :end], attn_mask=allowed, scale=scale,
                                       enable_gqa=q.shape[1] != keys.shape[1])
    x = x + F.linear(a.transpose(1, 2).reshape(rows, length, heads * d), o_w, o_b)
    gate, up = F.linear(rms_norm(x, norm2, eps), gate_up_w).chunk(2, dim=-1)
    return x + F.linear(F.silu(gate) * up, down_w)


def embed_step(ids, positions, mask, write, embed, cos_table, sin_table, window: int | None):
    """The step's token embedding [R, E], which columns each row attends to [R, L], and its rotary cos/sin
    [R, 1, 1, rot]."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    valid = (columns[None, :] <= write) & (mask != 0)
    if window is not None:
        valid &= columns[None, :] > write - window
    at = positions[:, 0]
    return embed[ids[:, 0]], valid, cos_table[at][:, None, None], sin_table[at][:, None, None]


def head_step(x, norm, lm_w, eps: float, form: int, fold: bool = False):
    """Final RMSNorm and LM head: logits [R, 1, V]."""
    return norm_product(x, norm, lm_w, None, eps, form, fold)[:, None, :]


class FusedLlamaStep:
    """The fused step of a loaded HF Llama-style model: `new_slot`, `prefill` (the prompt pass) and `one_token`
    (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three functions
    with (`{}`: inductor's defaults), or None to run them eagerly."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        config = model.config
        check_config(config)
        self.settings, self.compiled = decoder_settings(settings), compile_options is not None
        self.model_type = config.model_type
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = attention.head_dim(config)
        self.eps, self.scale = config.rms_norm_eps, self.head_dim ** -0.5
        self.window = sliding_window(config)
        core = model.model
        self.embed = core.embed_tokens.weight.detach()
        self.norm = core.norm.weight.detach()
        self.lm_head = model.lm_head.weight.detach()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self.cos, self.sin = _rope_table(core.rotary_emb, config.max_position_embeddings, self.dtype, self.device)
        norms = (self.heads, self.kv_heads) if attention.head_norms(config) else None
        self.layers = [_layer_weights(layer, norms) for layer in core.layers]
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)
        prompt = functools.partial(prompt_layer, heads=self.heads, kv_heads=self.kv_heads, eps=self.eps,
                                   scale=self.scale)
        self._prompt = prompt_function(prompt, self.compiled, self.device, self.settings)

    def new_slot(self, rows: int, max_length: int) -> KVSlot:
        """Our static cache (`CausalLM.fused_step.kv_slot`), its buffers [rows, kv_heads, max_length, head_dim]."""
        return kv_slot(rows, max_length, len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device,
                       self.settings.transposed_values)

    def one_token(self, slot: KVSlot) -> torch.Tensor:
        """Logits [R, 1, V] of the token in `slot.ids`, its K/V written at `slot.write`."""
        width = self.embed.shape[1]
        form = lambda features: self.settings.form(slot.rows, self.compiled, width, features, self.device)  # noqa: E731
        _, qkv_w, _, _, o_w, _, _, gate_up_w, down_w = self.layers[0]
        forms = tuple(form(w.shape[1]) for w in (qkv_w, o_w, gate_up_w, down_w))
        columns = slot.max_length if self.window is None else min(self.window, slot.max_length)  # read at most
        attention = self.settings.attention_on(self.device, columns, self.head_dim)
        x, valid, cos, sin = self._embed(slot.ids, slot.positions, slot.mask, slot.write, self.embed, self.cos,
                                         self.sin, self.window)
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._layer(x, weights, keys, values, slot.write, valid, cos, sin, heads=self.heads,
                            kv_heads=self.kv_heads, eps=self.eps, scale=self.scale, forms=forms,
                            attention=attention,
                            transposed=self.settings.transposed_values, fold=self.settings.fold_norms,
                            window=self.window, fuse=self.settings.fuses(self.model_type))
        head = self.settings.head_form(slot.rows, self.compiled, width, self.device)
        return self._head(x, self.norm, self.lm_head, eps=self.eps, form=head, fold=self.settings.fold_norms)

    def prefill(self, input_ids, mask, position_ids, slot: KVSlot, last_only: bool) -> torch.Tensor:
        """The prompt pass, eager: input_ids [R, S] at columns mask.shape[1] - S ..., mask [R, columns so far].
        Each query sees the columns up to its own that the mask (and the window) keeps, and always itself (a
        padding row's query then stays finite, so later layers' K/V at padding columns do too)."""
        start = mask.shape[1] - input_ids.shape[1]
        allowed = prompt_mask(mask, input_ids.shape[1], self.window)  # [R, 1, S, total]
        cos, sin = self.cos[position_ids][:, None], self.sin[position_ids][:, None]  # [R, 1, S, rot]
        x = self.embed[input_ids]
        for weights, keys, values in zip(self.layers, slot.past[0::2], slot.past[1::2]):
            x = self._prompt(x, weights, keys, values, start, allowed, cos, sin,
                             transposed=self.settings.transposed_values)
        if last_only:
            x = x[:, -1:]
        return F.linear(rms_norm(x, self.norm, self.eps), self.lm_head)

def _rope_table(rotary, positions: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, rot] for every position, from HF's own rotary module (its frequencies, each twice,
    and its attention scaling), in the model's dtype as HF hands them to its layers."""
    ids = torch.arange(positions, device=device)[None]
    cos, sin = rotary(torch.zeros(1, dtype=dtype, device=device), ids)
    return cos[0].to(dtype), sin[0].to(dtype)


def _layer_weights(layer, head_norms: tuple[int, int] | None) -> tuple:
    """One layer's weights as the layer function takes them: q/k/v and gate/up each as one [out, in] product; with
    `head_norms` (the query and key/value head counts) the heads' norm gains as `queries_keys` takes them, one row a
    head (Qwen3's `q_norm` on each query head, then `k_norm` on each key head; else None)."""
    attn, mlp = layer.self_attn, layer.mlp
    detach = lambda t: None if t is None else t.detach()  # noqa: E731
    if hasattr(attn, "qkv_proj"):  # Phi-3: fused as stored
        qkv_w, qkv_b = attn.qkv_proj.weight.detach(), detach(attn.qkv_proj.bias)
    else:
        parts = (attn.q_proj, attn.k_proj, attn.v_proj)
        qkv_w = torch.cat([p.weight.detach() for p in parts])
        qkv_b = None if parts[0].bias is None else torch.cat([p.bias.detach() for p in parts])
    if hasattr(mlp, "gate_up_proj"):  # Phi-3: gate then up, as stored
        gate_up = mlp.gate_up_proj.weight.detach()
    else:
        gate_up = torch.cat([mlp.gate_proj.weight.detach(), mlp.up_proj.weight.detach()])
    qk_norm = None
    if head_norms:
        heads, kv_heads = head_norms
        qk_norm = torch.cat([attn.q_norm.weight.detach().expand(heads, -1),
                             attn.k_norm.weight.detach().expand(kv_heads, -1)])
    return (layer.input_layernorm.weight.detach(), qkv_w, qkv_b, qk_norm, attn.o_proj.weight.detach(),
            detach(attn.o_proj.bias), layer.post_attention_layernorm.weight.detach(), gate_up,
            mlp.down_proj.weight.detach())
