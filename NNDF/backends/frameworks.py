"""The `frameworks` backend: PyTorch through HF transformers, on the run's device and dtype (decoder-only models;
encoder-decoder kinds subclass it with their own steps).

A family may declare fused decode steps for some of its model types (`with_fused_decode`, in its
`<family>/frameworks.py`): `--fused-decode` then runs that step (`NNDF.backends.torch_steps.FusedStep`) instead
of the model's own code for the static cache; other model types, and kinds that declare none, refuse the flag
(`Backend.check_fused_decode`)."""
from __future__ import annotations

from NNDF.backends.base import Backend
from NNDF.context import RunContext


class FrameworksBackend(Backend):
    name = "frameworks"
    runs_torch_model = True

    fused_steps: dict[str, str] = {}  # HF model type -> "module:Class" of the family's fused decode step

    def with_fused_decode(self, steps: dict[str, str]) -> FrameworksBackend:
        """Declare the family's fused decode steps: model type -> "module:Class", a class taking (the loaded HF
        model, inductor options or None for eager) that implements `FusedStep`."""
        self.fused_steps = dict(steps)
        return self

    def fused_decode_types(self) -> tuple[str, ...]:
        return tuple(self.fused_steps)

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        import torch

        gpu = f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU only (no CUDA GPU)"
        return True, f"torch {torch.__version__}, {gpu}"

    def setup(self, run: RunContext):
        from NNDF.backends.torch_steps import TorchSteps

        options = run.options
        options.check_graph_needs_static(self.name)
        model = run.torch_model()
        return TorchSteps(model, options.use_cache, options.static_cache, options.use_cuda_graph,
                          options.compile_mode if options.torch_compile else None, self._fused_step(run, model))

    def _fused_step(self, run: RunContext, model):
        """The family's fused decode step for this model (`--fused-decode`), compiled as --compile-mode says."""
        from NNDF import registry
        from NNDF.backends.torch_steps import COMPILE_OPTIONS

        options = run.options
        if not options.fused_decode:
            return None
        self.check_fused_decode(model.config.model_type)
        step_class = registry.load(self.fused_steps[model.config.model_type])
        return step_class(model, COMPILE_OPTIONS[options.compile_mode] if options.torch_compile else None)
