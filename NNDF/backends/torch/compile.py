"""`torch.compile` for the `frameworks` backend: inductor's option sets by `--compile-mode`, and one compile call
(static shapes; inductor's own CUDA graphs off, so a kind's steps capture graphs themselves)."""
from __future__ import annotations

import torch


COMPILE_OPTIONS = {"default": {}, "max-autotune": {"max_autotune": True, "coordinate_descent_tuning": True}}


def compile_step(model: torch.nn.Module, mode: str):
    options = COMPILE_OPTIONS[mode]
    return torch.compile(model, dynamic=False, options=options or None)
