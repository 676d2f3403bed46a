"""Pieces the families' fused decode steps (`--fused-decode` on frameworks: GPT2/fused_decode.py,
LLAMA/fused_decode.py, OPT/fused_decode.py) share: the weight product in the form inductor fuses best for few rows, the step's
functions compiled once, and the slot over the step's own K/V buffers."""
from __future__ import annotations

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
