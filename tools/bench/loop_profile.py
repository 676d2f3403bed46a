"""Where a generated token's time goes beyond the captured step: one greedy (or beam search) generation under
torch's profiler (CUPTI sees every kernel, ONNX Runtime's and a replayed CUDA graph's included), as the benchmark
runs it (batch 1, the benchmark's random inputs, the device left to run ahead, one synchronisation at the end).

Per token (a beam step with beams): the wall time, the GPU's busy time (kernels' device time), its idle time (the
gaps between one kernel's end and the next one's start: launch latency, host work the device waits for), the kernel
count, and the kernels that run once per token (the loop's own work around the step: the logits' cast, the token
choice, the copies into the step's inputs), so TPOT minus the step's GPU time (speed_matrix.step_time) can be read
kernel by kernel.
Called by decoder_graphs.py (job `loop`) and seq2seq_speed.py (jobs `loop`, `loop-beams`); CUDA only.
"""
from __future__ import annotations

import collections
import time

import torch

from NNDF.actions.common import backend_steps, generate_prompt, open_run
from NNDF.generation import GenerationConfig


def loop_profile(label: str, family: str, run_options, backend: str, prompt: int = 128, new: int = 64,
                 top: int = 16, beams: int = 1) -> dict:
    """One profiled generation of `new` tokens (with `beams` beams) after a `prompt`-token prompt (the encoder's,
    for an encoder-decoder) (one warm-up generation first)."""
    from torch.profiler import ProfilerActivity, profile

    run = open_run(family, run_options, (backend,))
    inputs = run.family.task.random_prompt(run, 1, prompt, torch.Generator().manual_seed(3))
    config = GenerationConfig(max_new_tokens=new, min_new_tokens=new, pad_token_id=0, num_beams=beams)
    with backend_steps(run, backend) as (_, steps):
        generate_prompt(steps, inputs, config)  # warm-up: captures the step
        torch.cuda.synchronize()
        start = time.perf_counter()
        generate_prompt(steps, inputs, config)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            generate_prompt(steps, inputs, config)
            torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    busy = sum(e.device_time for e in kernels)
    idle = sum(max(0.0, b.time_range.start - a.time_range.end) for a, b in zip(kernels, kernels[1:]))
    calls, spent = collections.Counter(), collections.Counter()
    for e in kernels:
        calls[e.name[:90]] += 1
        spent[e.name[:90]] += e.device_time
    once = [{"name": n, "per_token": calls[n] / new, "us_per_token": spent[n] / new}
            for n, _ in calls.most_common() if new * 0.9 <= calls[n] <= new * 2.5]
    return {"model": label, "backend": backend, "beams": beams, "new_tokens": new,
            "wall_ms_per_token": wall * 1e3 / new,
            "busy_us_per_token": busy / new, "idle_us_per_token": idle / new, "kernels_per_token": len(kernels) / new,
            "once_per_token": sorted(once, key=lambda k: -k["us_per_token"])[:top]}
