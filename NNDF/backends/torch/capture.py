"""CUDA-graph capture of a static slot's one-token step, for any kind's PyTorch steps: warm up on a side stream
(cuBLAS workspaces, inductor's compilation), then capture. A slot's step writes its K/V at the slot's device-held
write position; warm-up runs write the same K/V the real step writes, and the position is put back after each
(`NNDF.cuda_graphs`)."""
from __future__ import annotations

from typing import Callable

import torch

from NNDF.cuda_graphs import restorer, warm_up
from NNDF.errors import UsageError
from NNDF.slots import KVSlot


def capture(slot: KVSlot, step: Callable[[KVSlot], torch.Tensor], device: torch.device, what: str,
            keep: tuple[torch.Tensor, ...] = ()) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """`step(slot)` captured: (the graph, its output, which replays overwrite). The warm-up runs leave the slot's
    write position and the tensors in `keep` (inputs the step itself advances) as they found them. `what` names
    the step in the one-line error a step that cannot be captured gives."""
    positions, kept = slot.positions_state(), restorer(keep)

    def restore():
        slot.restore_positions(positions)
        kept()

    warm_up(lambda: step(slot), device, restore)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            output = step(slot)
    except RuntimeError as exc:  # e.g. transformers 5.17's eager-attention mask copies a CPU scalar per call
        import transformers

        first = str(exc).strip().splitlines()[0][:160]
        raise UsageError(f"--use-cuda-graph: {what} cannot be captured with transformers {transformers.__version__} "
                         f"({first}); add --torch-compile or drop --use-cuda-graph") from exc
    restore()
    return graph, output
