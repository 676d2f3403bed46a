"""What every CUDA-graph capture in the project shares, whatever it captures (a backend's one-token step,
`NNDF.backends.torch.capture`; the generation loop's beam bookkeeping, `NNDF.generation`): warm-up runs on a side
stream before the capture, and putting back the state those runs advance."""
from __future__ import annotations

from typing import Callable

import torch


def restorer(tensors) -> Callable[[], None]:
    """A function that puts `tensors` back as they are now (from copies made here)."""
    tensors = list(tensors)
    saved = [t.clone() for t in tensors]

    def restore():
        for tensor, value in zip(tensors, saved):
            tensor.copy_(value)
    return restore


def warm_up(run: Callable[[], object], device: torch.device, restore: Callable[[], None], runs: int = 2) -> None:
    """`run()` `runs` times on a side stream before a capture (lazy workspaces, compilation), `restore()` after each;
    the current stream then waits for them."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(runs):
            run()
            restore()
    torch.cuda.current_stream(device).wait_stream(side)
