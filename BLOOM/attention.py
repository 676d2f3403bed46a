"""BLOOM's ALiBi slopes, for both fused paths (BLOOM/fused_decode.py, BLOOM/fused_onnx.py): one slope per head,
taken from HF's own public `build_alibi_tensor` (its alibi at key position 1 is the slope), so any head count gets
HF's numbers, interleaved extra slopes included, in every transformers version that has the function."""
from __future__ import annotations

import torch


def alibi_slopes(heads: int, device="cpu") -> torch.Tensor:
    """HF's ALiBi slope per head [H], fp32."""
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)  # [H, 1, 2]: slope x (0, 1)
    return alibi[:, 0, 1].to(device)
