"""Pieces the families' fused decode steps (`--fused-decode` on frameworks: GPT2/fused_decode.py,
GPT2/fused_decode_rotary.py, OPT/, BLOOM/, LLAMA/fused_decode.py; the encoder-decoders' through Seq2Seq/) share:
the weight product in the form inductor fuses best for few rows (or through our Triton GEMV kernel,
`NNDF.backends.torch.kernels`), the one-query attention (plain ops, SDPA or our Triton kernels), the step's
internal settings and the decoder families' default ones, its functions compiled once, and the slot over the
step's own K/V buffers."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from NNDF.errors import UsageError
from NNDF.slots import KVSlot, step_inputs, write_kv_columns


def compiled(functions: tuple, compile_options: dict | None) -> tuple:
    """The step's functions, each compiled by inductor with fixed shapes (`compile_options`: inductor options, `{}`
    its defaults), or as they are when `compile_options` is None."""
    if compile_options is None:
        return functions
    return tuple(torch.compile(fn, dynamic=False, options=compile_options or None) for fn in functions)


def prompt_function(function, compiled_step: bool, device: torch.device, settings: "FusedSettings"):
    """The prompt pass's layer function: compiled by inductor (its default options, whatever the step's) where
    `settings.compiled_prompt`, the step is compiled (`compiled_step`) and runs on CUDA; else as it is (on the CPU
    a compile costs more than it saves). Compiled for the shapes it first meets, then once more for any prompt
    length and number of rows once those change (torch.compile's automatic dynamic shapes); bind the model's
    constants (head counts, eps) with `functools.partial`, so they stay constants."""
    if not (settings.compiled_prompt and compiled_step and device.type == "cuda"):
        return function
    return torch.compile(function)


def kv_slot(rows: int, max_length: int, layers: int, heads: int, head_dim: int, dtype, device,
            transposed_values: bool = False) -> KVSlot:
    """A fused step's static cache: per layer a K and a V buffer [rows, heads, max_length, head_dim] (`past` holds
    them as K0, V0, K1, V1, ...; with `transposed_values` each V is [rows, heads, head_dim, max_length]), the
    full-width mask, ids, positions and the write position [1] on the device."""
    shape = (rows, heads, max_length, head_dim)
    value_shape = (rows, heads, head_dim, max_length) if transposed_values else shape
    past = [torch.zeros(value_shape if i % 2 else shape, dtype=dtype, device=device) for i in range(2 * layers)]
    inputs = step_inputs(rows, max_length, device)
    inputs["cache_position"] = torch.zeros(1, dtype=torch.long, device=device)
    return KVSlot(rows, max_length, past, inputs)


GEMV = -1  # `product`'s form through our Triton GEMV kernel
ATTENTIONS = ("reduction", "sdpa", "kernel", "split", "auto")  # `FusedSettings.attention` (`attention_on`)


def triton_kernels():
    """`NNDF.backends.torch.kernels` (our Triton kernels), imported where a step first uses them: Triton comes with
    torch's CUDA builds; on the CPU only the tests run the kernels, under Triton's interpreter."""
    from NNDF.backends.torch import kernels

    return kernels


def product(x, weight, bias, form: int, relu: bool = False, dtype: torch.dtype | None = None,
            norm: tuple | None = None, activation: str | None = None, residual=None, fuse: bool = True,
            cache: tuple | None = None):
    """x [..., in] times a weight stored [out, in] + bias. `form` (`FusedSettings.form`): 0 `F.linear` (cuBLAS);
    1 the reduction form `(x[..., None, :] * W).sum(-1)` accumulated in fp32 (inductor fuses it with its prologue
    and epilogue and the casts into its loads; eager would materialise the product); n > 1 the reduction form
    summed in n parts (each output's sum split over n programs, then one short sum: a long sum into few outputs
    otherwise leaves most of the GPU idle); `GEMV` our Triton kernel (`kernels.gemv`: split sums too, summed in
    what inductor makes of the caller). A bool is 0 or 1.
    Around the product: `norm` (kind, gain, shift, eps) normalises x first (kind "layer": F.layer_norm; "rms":
    `rms_norm`), `activation` then applies to it ("relu", F.gelu's `approximate`: "none", "tanh", or "swiglu":
    silu(gate) * up of x's two halves), `dtype` casts it (x's by default), and `residual` [..., out] is added to
    the result. Our GEMV applies a ReLU as it loads x
    (exact: a ReLU commutes with its upcast), and with `fuse` (`FusedSettings.gemv_fusion`) the norm, any
    activation and the residual add too, each rounded as the eager op's output is: no kernel of their own.
    `cache` (keys, values, write, q_features: `kernels.Cache`): the key and value columns of a q/k/v product [R,
    ...] also written into the K/V buffers at the write position (`NNDF.slots.write_kv_columns`; inside our GEMV
    with `fuse`)."""
    activation = "relu" if relu else activation
    if form == GEMV and fuse:
        if cache is not None:
            cache = triton_kernels().Cache(*cache)
        return triton_kernels().gemv(x, weight, bias, dtype=dtype, norm=norm, activation=activation,
                                     residual=residual, cache=cache)
    if norm is not None:
        kind, gain, shift, eps = norm
        x = F.layer_norm(x, (x.shape[-1],), gain, shift, eps) if kind == "layer" else rms_norm(x, gain, eps)
    on_load = form == GEMV and activation == "relu"
    if activation == "swiglu":
        gate, up = x.chunk(2, dim=-1)
        x = F.silu(gate) * up
    elif activation is not None and not on_load:
        x = F.relu(x) if activation == "relu" else F.gelu(x, approximate=activation)
    if form == GEMV:
        out = triton_kernels().gemv(x, weight, bias, dtype=dtype, activation="relu" if on_load else None)
    else:
        if dtype is not None:
            x = x.to(dtype)
        if not form:
            out = F.linear(x, weight, bias)
        else:
            if form > 1:
                out_features, in_features = weight.shape
                parts = x.float().unflatten(-1, (form, in_features // form))  # [..., n, in / n]
                out = (parts[..., None, :, :] * weight.float().view(out_features, form, -1)).sum(-1).sum(-1)
            else:
                out = (x[..., None, :].float() * weight.float()).sum(-1)
            out = (out if bias is None else out + bias.float()).to(x.dtype)
    out = out if residual is None else residual + out
    if cache is not None:
        write_kv_columns(out, *cache)
    return out


def rms_norm(x, gain, eps: float):
    """HF's Llama RMS norm: x times 1 / RMS(x) in fp32, rounded to x's dtype, times the gain (T5's where x and the
    gain share a dtype)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * gain


@dataclass(frozen=True)
class FusedSettings:
    """A fused step's internal choices (not user flags: the device benchmark A/Bs them)."""

    reduction_rows: int = 4  # compiled steps of at most this many rows use the reduction form for products...
    # ...in models at most this wide: at Llama-3-8B's 4096 cuBLAS's products read the weights faster (measured on
    # an H200: 5.68 against 6.37 ms per token, docs/PERFORMANCE.md)
    reduction_width: int = 2048
    # products of the reduction form that sum over more than this many features run as `splits` parts
    # (`product`; 0: never), or as F.linear where `splits` is 0
    split_above: int = 0
    splits: int = 8
    # products of at most `gemv_rows` rows in a model at most `gemv_width` wide that sum over more than this many
    # features run our Triton GEMV kernel, compiled or not, where `kernels_on` the step's device (None: none; 0:
    # all). One row: at 2 and 4 rows cuBLAS read Mistral-7B's and Qwen2.5-0.5B's large products faster (H100)
    gemv_above: int | None = None
    gemv_rows: int = 1
    gemv_width: int = 16384
    # the LM head through our GEMV kernel whatever its width (its many outputs: where a step implements it)
    gemv_head: bool = False
    # one-query attention: plain ops inductor fuses ("reduction"), "sdpa", "kernel": our Triton kernel (one
    # program per row and head), "split": our Triton kernel over column chunks (flash decoding), or "auto": one
    # of our two by head size; each where `attention_on` says it serves, else "reduction"
    attention: str = "reduction"
    # "auto": the split kernel above this head size. One program per head walks a head's columns alone, which
    # leaves the GPU idle where heads are few and wide: H100 steps at 256 columns, GPT-J-6B's 16 heads of 256
    # 4.59 ms split against 4.87; one program was faster at gpt2-xl's 25 heads of 64 (2.47 against 2.58),
    # GPT-NeoX-20B's 64 of 96 (14.89 against 15.00), Llama-3-8B's 32 of 128 over 8 key/value heads (5.80
    # against 5.84), Mistral-7B's with its 64-column window (5.47 against 5.60), level at OPT-6.7B's 32 of 128
    # (5.36 and 5.35); split was faster at BLOOM-7B1's 32 of 128 with ALiBi (5.57 against 5.64: `attention_on`
    # takes it wherever a step has ALiBi)
    split_head_dim: int = 128
    # "auto" also takes the split kernel (at any length) in steps of more than `split_rows` rows and over more than
    # `split_columns` columns (None: neither). The encoder-decoder steps set both (H200, `Seq2Seq.fused_step`): one
    # program per head over BLIP-large's 577 image columns took 357 us a step against 73 split; above 8 rows split
    split_rows: int | None = None
    split_columns: int | None = None
    # our Triton kernels on any device, not only CUDA (the CPU tests run them under Triton's interpreter)
    kernels_everywhere: bool = False
    # V buffers stored [.., head_dim, length], so p.V sums along contiguous memory (where a step implements it)
    transposed_values: bool = False
    # a norm's statistics summed beside the reduction-form product that follows it (one kernel, not two; where a
    # step implements it)
    fold_norms: bool = False
    # products a half-precision model keeps in fp32 (HF's `_keep_in_fp32_modules`: T5's `wo`) read from a half copy
    # of their weights where our GEMV or the reduction form runs them, still summed and returned in fp32: half the
    # bytes (flan-T5-XL: 0.5 of a token's 3.6 GB), the weights rounded as every other one is (where a step
    # implements it: T5; the copy is held beside the model's own)
    half_kept_fp32: bool = False
    # a layer's new key and value written into its self-attention buffers by one write, the slot's K and V of the
    # layer taken as one [2, rows, ...] view (one kernel a layer, not two; where a step implements it: the
    # encoder-decoder steps, `Seq2Seq.fused_step.write_kv`)
    paired_kv_write: bool = False
    # the steps (by HF model type) whose norms, activations, residual adds and K/V writes run inside our GEMV where
    # it runs a product (`product`'s `fuse`: no kernels of their own around it; where a step implements it: GPT-2,
    # OPT's pre-norm layout, the LLAMA family; `fuses`)
    gemv_fusion: tuple[str, ...] = ()
    # the prompt pass's layer function compiled by inductor, for any prompt length and number of rows, where the
    # step is compiled and runs on CUDA (`prompt_function`; where a step implements it: the LLAMA family). Eager, a
    # prompt pass launches some 100 ops a layer from the host, which the GPU waits on: Qwen3-8B's 36 layers took
    # 46.6 ms against HF static's 33.5 (H200, docs/PERFORMANCE.md)
    compiled_prompt: bool = True

    def __post_init__(self):
        if self.attention not in ATTENTIONS:
            raise ValueError(f"attention {self.attention!r}: one of {', '.join(ATTENTIONS)}")
        if self.attention not in ("reduction", "sdpa") and self.transposed_values:
            raise ValueError("the attention kernel reads V buffers [.., length, head_dim]: not transposed_values")

    def fuses(self, model_type: str) -> bool:
        """Whether a step of this HF model type runs its norms, activations, residual adds and K/V writes inside our
        GEMV (`gemv_fusion`)."""
        return model_type in self.gemv_fusion

    def reduces(self, rows: int, compiled: bool, width: int = 0) -> bool:
        return compiled and rows <= self.reduction_rows and width <= self.reduction_width

    def head_form(self, rows: int, compiled: bool, width: int, device: torch.device) -> int:
        """`product`'s form for the LM head ([out, width]): `GEMV` with `gemv_head`, else `form`'s."""
        return GEMV if self.gemv_head and self._gemv(rows, width, device) else self.form(rows, compiled, width,
                                                                                          width, device)

    def _gemv(self, rows: int, width: int, device: torch.device) -> bool:
        """Our GEMV kernel serves this step (`gemv_rows`, a model at most `gemv_width` wide, kernels on the device)."""
        return self.kernels_on(device) and rows <= self.gemv_rows and width <= self.gemv_width

    def kernels_on(self, device: torch.device) -> bool:
        """Whether our Triton kernels run on this device (CUDA; any with `kernels_everywhere`)."""
        return device.type == "cuda" or self.kernels_everywhere

    def attention_on(self, device: torch.device, columns: int, head_dim: int, alibi: bool = False,
                     rows: int = 1) -> str:
        """The one-query attention (`attend`'s) a step of `rows` rows runs on this device when it reads at most
        `columns` cache columns (its buffer, or its window where shorter). Our kernels only where they run: "split"
        at any length; "kernel" where its one program per head walks the columns quickly
        (`kernels.attention_columns`); "auto": "split" above `split_rows` rows or `split_columns` columns, else
        within the kernel's limit "split" at head sizes above `split_head_dim` and with ALiBi (`alibi`: a bias
        loaded per column, which one program per head walks alone), "kernel" at the others. Elsewhere
        "reduction" (inductor reads long buffers in parallel)."""
        if self.attention in ("reduction", "sdpa"):
            return self.attention
        if not self.kernels_on(device):
            return "reduction"
        more = [(rows, self.split_rows), (columns, self.split_columns)]
        if self.attention == "split" or (self.attention == "auto" and any(n > limit for n, limit in more
                                                                           if limit is not None)):
            return "split"
        if columns > triton_kernels().attention_columns(head_dim):
            return "reduction"
        split = head_dim > self.split_head_dim or alibi
        return "split" if self.attention == "auto" and split else "kernel"

    def forms(self, rows: int, compiled: bool, width: int, device: torch.device, *weights) -> tuple:
        """`form` of each product of a layer, by its weight [out, in] (None: no such product, form 0)."""
        return tuple(0 if w is None else self.form(rows, compiled, width, w.shape[1], device) for w in weights)

    def form(self, rows: int, compiled: bool, width: int, features: int,
             device: torch.device = torch.device("cpu")) -> int:
        """`product`'s form for a product over `features` input features in a step of `rows` rows of a model
        `width` wide on `device`: 0 F.linear, 1 one reduction, n > 1 a reduction in n parts, `GEMV` our kernel."""
        if self.gemv_above is not None and features > self.gemv_above and self._gemv(rows, width, device):
            return GEMV
        if not self.reduces(rows, compiled, width):
            return 0
        if self.split_above and features > self.split_above:
            return self.splits if not self.splits or features % self.splits == 0 else 1
        return 1


# the decoder-only families' default: on CUDA our Triton GEMV for a one-row step's products (the LM head
# included) and our attention kernels; elsewhere, and for more rows, inductor's reduction form or cuBLAS
# (docs/PERFORMANCE.md, H100: Llama-3-8B's step 5.84 ms against 6.47 on cuBLAS and inductor's kernels; gpt2-xl
# 2.52 ms a token against 3.23; GPT-J-6B's step 4.59 ms with the split attention against 4.87 with one program
# per head)
DECODER_SETTINGS = FusedSettings(gemv_above=0, attention="auto", gemv_fusion=("gpt2",))
# the model types whose steps implement `gemv_fusion`. On an H200 (docs/PERFORMANCE.md) it pays at GPT-2's shapes
# (124M 0.295 against 0.334 ms a token, gpt2-xl 1.95 against 2.05: 64 and 244 kernels a step against 136 and 532)
# and costs elsewhere (Qwen2.5-0.5B 0.797 against 0.760, OPT-6.7B 4.56 against 4.03, Llama-3-8B 4.96 against 4.44:
# every program of a wide product reads the whole input row again for the norm's statistics or SwiGLU's two
# halves, and the products a residual is added to run unsplit), so only GPT-2's steps fuse by default
FUSING_TYPES = ("gpt2", "opt", "llama", "mistral", "qwen2", "qwen3", "phi3")


def check_model_type(config, model_types, step: str = "fused step") -> None:
    """Refuse, in one line, a config whose HF model type `step` (a family's fused decode step) does not run."""
    if getattr(config, "model_type", None) not in model_types:
        raise UsageError(f"--fused-decode: model type {config.model_type!r} has no {step} on frameworks "
                         f"(model types with one: {', '.join(model_types)})")


def decoder_settings(settings: FusedSettings | None = None) -> FusedSettings:
    """`settings`, else the decoder families' default, read when a step is made (the device benchmark swaps
    `DECODER_SETTINGS` to time other choices: tools/bench/speed_matrix.py)."""
    return settings or DECODER_SETTINGS


def attend_one(q, keys, values, valid, scale: float, transposed: bool = False, alibi: tuple | None = None,
               bias=None):
    """One query per row and head, q [R, H, D], over the buffers [R, KVH, L, D] (values [R, KVH, D, L] when
    `transposed`) masked by `valid` [R, L]; query heads in groups of H / KVH share a key/value head. `alibi`:
    (slopes [H], offsets [R, L]), each score plus slope_h * offsets[r, column] (BLOOM); `bias` [1 or R, H, L]
    fp32, added to the scores (T5's relative positions)."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    q = q.reshape(rows, kv_heads, heads // kv_heads, dim)
    scores = (q[:, :, :, None, :].float() * keys[:, :, None].float()).sum(-1) * scale  # [R, KVH, G, L]
    if alibi is not None:
        slopes, offsets = alibi
        scores = scores + (slopes[None, :, None] * offsets[:, None, :]).reshape(rows, kv_heads, -1, offsets.shape[1])
    if bias is not None:
        scores = scores + bias.reshape(bias.shape[0], kv_heads, -1, bias.shape[-1])
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    if transposed:
        out = (p[:, :, :, None, :] * values[:, :, None].float()).sum(-1)  # [R, KVH, G, D]
    else:
        out = (p[..., None] * values[:, :, None].float()).sum(-2)
    return out.reshape(rows, heads, dim).to(q.dtype)


def attend_sdpa(q, keys, values, valid, scale: float, transposed: bool = False, alibi: tuple | None = None,
                bias=None):
    """`attend_one` as one `F.scaled_dot_product_attention` call (the key/value heads repeated for the query
    heads: SDPA's own grouped-query option has no masked kernel on CUDA; ALiBi and `bias` as an additive mask)."""
    groups = q.shape[1] // keys.shape[1]
    values = values.transpose(-1, -2) if transposed else values
    keys, values = (t.repeat_interleave(groups, dim=1) if groups > 1 else t for t in (keys, values))
    mask = valid[:, None, None, :]
    if alibi is not None or bias is not None:
        slopes, offsets = alibi or (None, None)
        added = (0 if alibi is None else slopes[None, :, None] * offsets[:, None, :]) + (0 if bias is None else bias)
        mask = added.masked_fill(~valid[:, None, :], float("-inf"))[:, :, None].to(q.dtype)  # [R, H, 1, L]
    out = F.scaled_dot_product_attention(q[:, :, None], keys, values, attn_mask=mask, scale=scale)
    return out[:, :, 0]


def attend(attention: str, q, keys, values, write, valid, scale: float, transposed: bool = False,
           window: int | None = None, alibi: tuple | None = None, bias=None):
    """The one query's attention [R, H, D] by `attention` (ATTENTIONS: "kernel" and "split" are ours, which read
    only the columns up to `write` inside the `window`; `FusedSettings.attention_on` says where they serve).
    `valid` [R, L] already holds the window; `alibi` and `bias`: `attend_one`'s."""
    if attention == "kernel":
        return triton_kernels().decode_attention(q, keys, values, valid, write, scale, window, alibi=alibi, bias=bias)
    if attention == "split":
        return triton_kernels().decode_attention_split(q, keys, values, valid, write, scale, window, alibi=alibi,
                                                       bias=bias)
    return (attend_sdpa if attention == "sdpa" else attend_one)(q, keys, values, valid, scale, transposed, alibi,
                                                                bias)


def layer_norm(x, norm: tuple, eps: float):
    """nn.LayerNorm over the last dimension; `norm` is (gain, bias), each None without elementwise affine."""
    return F.layer_norm(x, (x.shape[-1],), norm[0], norm[1], eps)


def prompt_mask(mask: torch.Tensor, length: int, window: int | None = None) -> torch.Tensor:
    """The prompt pass's boolean attention mask [R, 1, S, total] for the last `length` of mask's columns: each
    query sees the columns up to its own that the mask keeps (within the last `window` columns, its own included,
    where there is a window), and always itself (a padding row's query then stays finite, so later layers' K/V at
    padding columns do too)."""
    total = mask.shape[1]
    columns = torch.arange(total, device=mask.device)
    own = total - length + torch.arange(length, device=mask.device)
    allowed = (columns[None, :] <= own[:, None]) & (mask[:, None, :] != 0)
    if window is not None:
        allowed &= columns[None, :] > own[:, None] - window
    return (allowed | (columns[None, :] == own[:, None]))[:, None]
