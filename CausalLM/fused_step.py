"""Pieces the families' fused decode steps (`--fused-decode` on frameworks: GPT2/fused_decode.py,
LLAMA/fused_decode.py, OPT/fused_decode.py) share: the weight product in the form inductor fuses best for few rows, the step's
functions compiled once, and the slot over the step's own K/V buffers."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from NNDF.slots import KVSlot, step_inputs


def compiled(functions: tuple, compile_options: dict | None) -> tuple:
    """The step's functions, each compiled by inductor with fixed shapes (`compile_options`: inductor options, `{}`
    its defaults), or as they are when `compile_options` is None."""
    if compile_options is None:
        return functions
    return tuple(torch.compile(fn, dynamic=False, options=compile_options or None) for fn in functions)


def kv_slot(rows: int, max_length: int, layers: int, heads: int, head_dim: int, dtype, device) -> KVSlot:
    """A fused step's static cache: per layer a K and a V buffer [rows, heads, max_length, head_dim] (`past` holds
    them as K0, V0, K1, V1, ...), the full-width mask, ids, positions and the write position [1] on the device."""
    shape = (rows, heads, max_length, head_dim)
    past = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(2 * layers)]
    inputs = step_inputs(rows, max_length, device)
    inputs["cache_position"] = torch.zeros(1, dtype=torch.long, device=device)
    return KVSlot(rows, max_length, past, inputs)


def product(x, weight, bias, reduce: bool):
    """x [..., in] times a weight stored [out, in] + bias. `reduce`: the reduction form `(x[..., None, :] * W).sum(-1)`
    accumulated in fp32 (inductor fuses it with its prologue and epilogue and the casts into its loads; eager
    would materialise the product); else `F.linear` (cuBLAS)."""
    if not reduce:
        return F.linear(x, weight, bias)
    out = (x[..., None, :].float() * weight.float()).sum(-1)
    return (out if bias is None else out + bias.float()).to(x.dtype)


@dataclass(frozen=True)
class FusedSettings:
    """A fused step's internal choices (not user flags: the device benchmark A/Bs them)."""

    reduction_rows: int = 4  # compiled steps of at most this many rows use the reduction form for products...
    # ...in models at most this wide: at Llama-3-8B's 4096 cuBLAS's products read the weights faster (measured on
    # an H200: 5.68 against 6.37 ms per token, docs/PERFORMANCE.md)
    reduction_width: int = 2048

    def reduces(self, rows: int, compiled: bool, width: int = 0) -> bool:
        return compiled and rows <= self.reduction_rows and width <= self.reduction_width


def layer_norm(x, norm: tuple, eps: float):
    """nn.LayerNorm over the last dimension; `norm` is (gain, bias), each None without elementwise affine."""
    return F.layer_norm(x, (x.shape[-1],), norm[0], norm[1], eps)


def prompt_mask(mask: torch.Tensor, length: int) -> torch.Tensor:
    """The prompt pass's boolean attention mask [R, 1, S, total] for the last `length` of mask's columns: each
    query sees the columns up to its own that the mask keeps, and always itself (a padding row's query then stays
    finite, so later layers' K/V at padding columns do too)."""
    total = mask.shape[1]
    columns = torch.arange(total, device=mask.device)
    own = total - length + torch.arange(length, device=mask.device)
    allowed = ((columns[None, :] <= own[:, None]) & (mask[:, None, :] != 0)) | (columns[None, :] == own[:, None])
    return allowed[:, None]
