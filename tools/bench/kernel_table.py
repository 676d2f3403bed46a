"""What one step is made of, from torch's profiler: the benchmarks' one kernel table.

`kernel_table(run, steps)` runs `run()` `steps` times under torch.profiler and returns the kernels per step, the
device time per step and the top kernels by time. CUPTI sees every kernel on the device, so this works for
torch's own steps, replayed CUDA graphs and ONNX Runtime's sessions alike. With `cuda=False` (the benchmarks' CPU
smoke runs) it tallies CPU operators by their self time instead.
"""
from __future__ import annotations

import collections


def kernel_table(run, steps: int, cuda: bool = True, top: int = 12, width: int = 90) -> dict:
    """{"kernels_per_step", "us_per_step", "top": [{"name", "per_step", "us_per_step", "share"}]} over `steps`
    calls of `run` (names cut to `width` characters, kernels of one name summed)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            run()
        if cuda:
            torch.cuda.synchronize()
    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    events = [e for e in prof.events() if e.device_type == kind]
    spent, calls = collections.Counter(), collections.Counter()
    for e in events:
        spent[e.name[:width]] += e.device_time if cuda else e.self_cpu_time_total
        calls[e.name[:width]] += 1
    total = sum(spent.values())
    return {"kernels_per_step": len(events) / steps, "us_per_step": total / steps,
            "top": [{"name": name, "per_step": calls[name] / steps, "us_per_step": us / steps,
                     "share": us / total if total else 0.0} for name, us in spent.most_common(top)]}
