"""The encoder kind on PyTorch: `Encoder.model.EncoderHead` (eager), optionally
compiled by `torch.compile` (`--torch-compile`, `--compile-mode`) and replayed from a CUDA graph
(`--use-cuda-graph`: one graph per input shape, captured on first use after a warm-up on a side stream; the
inputs are copied into the graph's fixed buffers and the output buffer is returned, valid until the next call).
"""
from __future__ import annotations

import torch

from NNDF.backends.torch.backend import FrameworksBackend, TorchAdapter
from NNDF.backends.torch.compile import compile_step
from NNDF.errors import UsageError


class TorchEncoderSteps:
    name = "frameworks"

    def __init__(self, module: torch.nn.Module, compile_mode: str | None = None, cuda_graph: bool = False):
        self.module = module
        self.device = next(module.parameters()).device
        self.run_module = compile_step(module, compile_mode) if compile_mode else module
        self.cuda_graph = cuda_graph
        self.graphs: dict[tuple, tuple[dict, torch.cuda.CUDAGraph, torch.Tensor]] = {}  # shapes -> captured

    @torch.inference_mode()
    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if not self.cuda_graph:
            return self.run_module(**inputs)
        key = tuple((name, tuple(t.shape)) for name, t in inputs.items())
        if key not in self.graphs:
            self.graphs[key] = self._capture(inputs)
        buffers, graph, output = self.graphs[key]
        names = list(inputs)
        torch._foreach_copy_([buffers[n] for n in names], [inputs[n] for n in names])  # one launch, not one per input
        graph.replay()
        return output

    def _capture(self, inputs: dict[str, torch.Tensor]):
        """Warm up on a side stream (cuBLAS workspaces, inductor's compilation), then capture one forward."""
        buffers = {name: tensor.clone() for name, tensor in inputs.items()}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                self.run_module(**buffers)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                output = self.run_module(**buffers)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0][:160]
            raise UsageError(f"--use-cuda-graph: {type(self.module.model).__name__}'s forward cannot be captured "
                             f"({first}); add --torch-compile or drop --use-cuda-graph") from exc
        return buffers, graph, output

    def close(self) -> None:
        self.graphs.clear()


class EncoderTorch(TorchAdapter):
    def steps(self, backend: FrameworksBackend, run) -> TorchEncoderSteps:
        from Encoder.model import encoder_head

        options = run.options
        return TorchEncoderSteps(encoder_head(run), options.compile_mode if options.torch_compile else None,
                                 options.use_cuda_graph)
