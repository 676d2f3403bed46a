"""The `frameworks` backend: PyTorch through HF transformers, on the run's device and dtype."""
from __future__ import annotations

from NNDF.backends.torch_steps import TorchSteps
from NNDF.context import RunContext
from NNDF.errors import UsageError


class FrameworksBackend:
    name = "frameworks"
    runs_torch_model = True  # the run's HF model stays loaded while this backend is in use

    @staticmethod
    def availability() -> tuple[bool, str]:
        import torch

        gpu = f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU only (no CUDA GPU)"
        return True, f"torch {torch.__version__}, {gpu}"

    def setup(self, run: RunContext) -> TorchSteps:
        options = run.options
        if options.use_cuda_graph and not options.static_cache:
            raise UsageError("--use-cuda-graph with the frameworks backend needs --static-cache (a growing cache "
                             "changes shapes every step)")
        return TorchSteps(run.torch_model(), options.use_cache, options.static_cache, options.use_cuda_graph,
                          options.torch_compile)
