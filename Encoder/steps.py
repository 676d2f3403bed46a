"""The step contract of encoder models: named inputs in, the head's output out, one forward pass.

Every encoder backend (PyTorch, ONNX Runtime, TensorRT) implements `EncoderSteps`. Inputs are the tokenizer's
(`input_ids`, `attention_mask`, and `token_type_ids` where the model takes them), int64 torch tensors [B, T] on
`steps.device`; the output is the head's tensor (`Head.output`): sentence embeddings [B, H] (pooled, and
normalized where the model says so) or logits [B, C] (sequence classification) / [B, T, C] (token
classification), float32 or the run's fp16, on `steps.device`, valid until the next call.
"""
from __future__ import annotations

from typing import Protocol

import torch


class EncoderSteps(Protocol):
    device: torch.device
    name: str  # backend name for reports

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """One forward pass over a (right-padded) batch; the head's output."""
        ...

    def close(self) -> None:
        """Free the backend's resources."""
        ...
