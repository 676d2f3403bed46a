"""Pieces the families' fused decode steps (`--fused-decode` on frameworks: GPT2/fused_decode.py,
LLAMA/fused_decode.py) share: the weight product in the form inductor fuses best for few rows."""
from __future__ import annotations

import torch.nn.functional as F


def product(x, weight, bias, reduce: bool):
    """x [..., in] times a weight stored [out, in] + bias. `reduce`: the reduction form `(x[..., None, :] * W).sum(-1)`
    accumulated in fp32 (inductor fuses it with its prologue and epilogue and the casts into its loads; eager
    would materialise the product); else `F.linear` (cuBLAS)."""
    if not reduce:
        return F.linear(x, weight, bias)
    out = (x[..., None, :].float() * weight.float()).sum(-1)
    return (out if bias is None else out + bias.float()).to(x.dtype)
