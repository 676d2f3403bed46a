"""The `frameworks` backend: PyTorch through HF transformers, on the run's device and dtype. Kind-neutral: the
kind's `TorchAdapter` (named in its `Task.adapters`) builds the steps from the run's model.

A family may declare fused decode steps for some of its model types (`BackendFacts.fused`, in its
`<family>/frameworks.py`): `--fused-decode` then runs that step (`CausalLM.torch_steps.FusedStep`) instead
of the model's own code for the static cache (`fused_step`); other model types, and families that declare none,
refuse the flag (`Backend.check_fused_decode`)."""
from __future__ import annotations

from abc import abstractmethod

from NNDF.backends.base import Adapter, Backend
from NNDF.context import RunContext


class TorchAdapter(Adapter):
    """What a kind runs on PyTorch: its steps over the run's HF model."""

    @abstractmethod
    def steps(self, backend: "FrameworksBackend", run: RunContext):
        """The step functions of this run (`backend.fused_step(run, model)`: the family's fused step, if asked)."""


class FrameworksBackend(Backend):
    name = "frameworks"
    runs_torch_model = True

    @classmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        import torch

        gpu = f"CUDA: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "CPU only (no CUDA GPU)"
        return True, f"torch {torch.__version__}, {gpu}"

    def setup(self, run: RunContext):
        return self.adapter_class(self.spec, self.task).steps(self, run)

    def fused_step(self, run: RunContext, model, required: bool = False):
        """The family's fused decode step for this model (`--fused-decode`, or `required` by the kind; else None),
        compiled as --compile-mode says."""
        from NNDF.backends.torch.compile import step_options

        options = run.options
        if not (options.fused_decode or required):
            return None
        self.check_fused_decode(model.config.model_type)
        step_class = self.fused[model.config.model_type]
        return step_class(model, step_options(options.compile_mode, model.device) if options.torch_compile else None)
