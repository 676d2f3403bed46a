"""The `frameworks` backend: PyTorch through HF transformers, on the run's device and dtype (decoder-only models;
encoder-decoder kinds subclass it with their own steps)."""
from __future__ import annotations

from NNDF.backends.base import Backend
from NNDF.context import RunContext


class FrameworksBackend(Backend):
    name = "frameworks"
    runs_torch_model = True

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        import torch

        gpu = f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU only (no CUDA GPU)"
        return True, f"torch {torch.__version__}, {gpu}"

    def setup(self, run: RunContext):
        from NNDF.backends.torch_steps import TorchSteps

        options = run.options
        options.check_graph_needs_static(self.name)
        return TorchSteps(run.torch_model(), options.use_cache, options.static_cache, options.use_cuda_graph,
                          options.compile_mode if options.torch_compile else None)
