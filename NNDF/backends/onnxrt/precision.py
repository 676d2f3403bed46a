"""fp32 islands: submodules a family declares precision-sensitive stay fp32 inside an fp16 export.

TensorRT 10+ (strongly typed) and TensorRT-RTX take precision from the graph itself, so an island has to be
in the ONNX: while exporting, the matching submodules run in fp32, with their floating inputs cast up and
their outputs cast back to the model's dtype. The model is restored afterwards (the frameworks backend of
the same run keeps using it). Families declare islands in `ExportSpec.fp32_modules` (e.g. T5's layer norms);
the decoder-only families need none.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch


def _matches(name: str, patterns) -> bool:
    return any(name == p or name.endswith("." + p) for p in patterns)


def _cast(value, dtype):
    if torch.is_tensor(value) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, dict):  # HF ModelOutput (e.g. a vision tower's BaseModelOutputWithPooling)
        return type(value)(**{k: _cast(v, dtype) for k, v in value.items()})
    if isinstance(value, tuple):
        return tuple(_cast(v, dtype) for v in value)
    return value


@contextmanager
def fp32_islands(model: torch.nn.Module, patterns: tuple[str, ...]):
    """Within the block, submodules whose qualified name is or ends with a pattern compute in fp32."""
    dtype = next(model.parameters()).dtype
    islands = [m for name, m in model.named_modules() if patterns and dtype != torch.float32 and _matches(name, patterns)]
    hooks, restore = [], [{n: p.dtype for n, p in m.named_parameters()} for m in islands]
    for module in islands:
        module.float()
        hooks.append(module.register_forward_pre_hook(  # positional and keyword inputs (pixel_values=...)
            lambda _m, args, kwargs: (_cast(args, torch.float32), _cast(kwargs, torch.float32)), with_kwargs=True))
        hooks.append(module.register_forward_hook(lambda _m, _args, out: _cast(out, dtype)))
    try:
        yield [name for name, m in model.named_modules() if any(m is i for i in islands)]
    finally:
        for hook in hooks:
            hook.remove()
        for module, dtypes in zip(islands, restore):  # as loaded (HF may keep some weights fp32, e.g. T5's wo)
            for name, param in module.named_parameters():
                param.data = param.data.to(dtypes[name])


class _NotAllFinite:
    """What the patched `torch.isfinite(x)` returns during export: `.all()` is False, without reading data."""

    def all(self) -> bool:
        return False


@contextmanager
def unconditional_fp16_clamp(enabled: bool):
    """HF BART clamps fp16 activations only `if not torch.isfinite(h).all()`: a data-dependent branch that
    torch.export cannot trace. Within the block (export only), `torch.isfinite` of an fp16 tensor answers "not
    all finite", so the clamp to +-(fp16 max - 1000) is exported unconditionally, as mBART's code does anyway
    (it changes nothing below that bound, and turns inf into the bound exactly as HF does)."""
    if not enabled:
        yield
        return
    original = torch.isfinite

    def isfinite(tensor):
        return _NotAllFinite() if tensor.dtype == torch.float16 else original(tensor)

    torch.isfinite = isfinite
    try:
        yield
    finally:
        torch.isfinite = original
