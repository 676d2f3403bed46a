"""The decoder-only kind on PyTorch: the HF model behind `TorchSteps` (static cache, CUDA graphs, torch.compile and
the family's fused decode step as the run's flags say)."""
from __future__ import annotations

from NNDF.backends.torch.backend import FrameworksBackend, TorchAdapter
from NNDF.context import RunContext


class DecoderTorch(TorchAdapter):
    def steps(self, backend: FrameworksBackend, run: RunContext):
        from CausalLM.torch_steps import TorchSteps

        options = run.options
        options.check_graph_needs_static(backend.name)
        model = run.torch_model()
        return TorchSteps(model, options.use_cache, options.static_cache, options.use_cuda_graph,
                          options.compile_mode if options.torch_compile else None, backend.fused_step(run, model))
