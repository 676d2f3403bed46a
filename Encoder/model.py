"""The module every encoder backend runs: the HF encoder plus the part of its head that belongs in the graph.

`EncoderHead(model, head, pooling)` takes the tokenizer's named inputs and returns the head's output: sentence
embeddings [B, H] (pooling over the tokens the mask keeps, then L2 normalization where the model declares it,
computed as sentence-transformers does) or the classifier's logits ([B, C], or [B, T, C] per token). PyTorch
runs it as is (frameworks), the ONNX export traces it (onnxrt, trt), so every backend returns the same tensor.
Softmax and label names stay outside (they are presentation, and the logits are what parity is checked on).
"""
from __future__ import annotations

import torch

from Encoder.heads import Head, Pooling


def pool(hidden: torch.Tensor, mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """Sentence embeddings [B, H] from token states [B, T, H] and the padding mask [B, T]."""
    if pooling.mode == "cls":
        pooled = hidden[:, 0]
    elif pooling.mode == "max":  # padded positions can never win
        floor = torch.finfo(hidden.dtype).min
        pooled = hidden.masked_fill(mask[..., None] == 0, floor).amax(dim=1)
    else:  # mean over the kept tokens (sentence-transformers clamps the count at 1e-9)
        weights = mask[..., None].to(hidden.dtype)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    if pooling.normalize:  # torch.nn.functional.normalize, as sentence-transformers' Normalize module
        pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
    return pooled


class EncoderHead(torch.nn.Module):
    """The HF encoder (AutoModel, or AutoModelFor{Sequence,Token}Classification) and its head's graph part."""

    def __init__(self, model: torch.nn.Module, head: Head, pooling: Pooling, input_names: tuple[str, ...]):
        super().__init__()
        self.model, self.head, self.pooling, self.input_names = model, head, pooling, input_names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {"token_type_ids": token_type_ids} if "token_type_ids" in self.input_names else {}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
        if self.head.architecture:  # a classifier: its logits as they are
            return out.logits
        return pool(out.last_hidden_state, attention_mask, self.pooling)


def encoder_head(run) -> EncoderHead:
    """The run's module (the model loaded with its head's class, on the run's device and dtype)."""
    task = run.family.task
    return EncoderHead(run.torch_model(), task.head(run.source, run.options), task.pooling(run.source),
                       task.input_names(run)).eval()
