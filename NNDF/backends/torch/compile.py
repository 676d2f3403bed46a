"""`torch.compile` for the `frameworks` backend: inductor's option sets by `--compile-mode`, and one compile call
(static shapes; inductor's own CUDA graphs off, so a kind's steps capture graphs themselves)."""
from __future__ import annotations

import functools

import torch


COMPILE_OPTIONS = {"default": {}, "max-autotune": {"max_autotune": True, "coordinate_descent_tuning": True}}
# programmatic dependent launch in the fused decode steps (CUDA, compute capability 9.0 and later): each kernel of a
# step is launched while the one before it still runs and waits on the device (griddepcontrol) before it reads what
# that one wrote; our GEMV reads its first weight tile before that wait. Inductor generates it for its kernels
# (`triton.enable_pdl`, where this torch has it) and our Triton kernels launch with it
# (`NNDF.backends.torch.kernels`). Read when a step is compiled and when our kernels launch (or are captured). On
# an H200, fp16, batch 1, in the same runs: GPT-2 124M 0.353 ms a token against 0.406, t5-small 0.234 against
# 0.264, BART-large 0.523 against 0.591, t5-base 0.465 against 0.541 (docs/PERFORMANCE.md)
PROGRAMMATIC_LAUNCH = True
# when each of our kernels lets the next kernel launch: "unnormed", as soon as all its programs have started, so that
# the next kernel's programs start while it still runs (our GEMV then reads its first weight tile meanwhile), except
# in our GEMVs that normalise their input (each of their programs computes its rows' statistics), which do so once
# their loads are done, as inductor's kernels do; "all": those early too; "none": none early. Either way a kernel
# waits on the device for the one before to end before it reads that one's output. On an H200, fp16, batch 1, in
# the same runs, ms a step (captured), unnormed / none / all: GPT-2 124M 0.234 / 0.255 / 0.271, gpt2-xl 1.845 /
# 1.929 / 2.042, Qwen2.5-0.5B (no norms in our GEMV) 0.678 / 0.734, OPT-6.7B 3.856 / 3.877 (docs/PERFORMANCE.md)
EARLY_LAUNCH = "unnormed"


def programmatic_launch(device) -> bool:
    """Whether kernels on this device launch with programmatic dependent launch (`PROGRAMMATIC_LAUNCH`, a CUDA
    device of compute capability 9.0 or later, a Triton that has it)."""
    device = torch.device(device)
    return (PROGRAMMATIC_LAUNCH and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
            and _triton_launches_programmatically())


@functools.cache
def _triton_launches_programmatically() -> bool:
    """Whether this Triton has the grid-dependency instructions (3.3 and later)."""
    try:
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401
    except ImportError:
        return False
    return True


def step_options(mode: str, device) -> dict:
    """Inductor's options for a fused decode step on `device` compiled with --compile-mode `mode`."""
    options = dict(COMPILE_OPTIONS[mode])
    if programmatic_launch(device) and hasattr(torch._inductor.config.triton, "enable_pdl"):
        options["triton.enable_pdl"] = True
    return options


def compile_step(model: torch.nn.Module, mode: str):
    options = COMPILE_OPTIONS[mode]
    return torch.compile(model, dynamic=False, options=options or None)
