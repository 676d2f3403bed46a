"""The backend contract: what every backend (PyTorch, ONNX Runtime, TensorRT, or a new one) is to the harness.

A backend class has a `name` (the CLI spelling), the `devices` it runs on, and `availability(options)`: whether it can run on this machine, and why not.
A backend is a kind-neutral runtime. `NNDF.registry.backend` binds an instance to one task (how a kind of model is
prompted and scored), the kind's *adapter* for this backend (what the kind exports, validates and runs here,
declared in the kind's `Task.adapters`), and the family's facts (its `ExportSpec`, its fused decode
implementations). `setup(run)` returns the step functions the shared generation loop runs
(`NNDF.steps.GenerativeSteps`; `ForwardSteps` for encoders), `build(run)` prepares its artifacts without running anything, and
`export_max_diff()` says how far an exported graph was from PyTorch when it was validated. Shared code calls only
these, never `getattr` on a backend.

A new backend: subclass `Backend` in its own module and add one line to `NNDF.registry.BACKENDS` (its class and
the option groups it owns: flags only it reads, e.g. TensorRT's). It serves the kinds that name an adapter for it,
or those its `serves(task)` accepts without one.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # imported for annotations only: keeps `--help` and `list` free of heavy imports
    from NNDF.backends.onnxrt.export import ExportSpec
    from NNDF.context import RunContext


class Backend(ABC):
    name: ClassVar[str]
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")  # checked by `open_run` before anything loads
    runs_torch_model: ClassVar[bool] = False  # True: the run's HF model stays loaded while this backend runs

    def __init__(self, task, spec: "ExportSpec | None" = None, adapter: type | None = None,
                 fused: dict | None = None, fused_support=None):
        """`adapter`: the kind's adapter class for this backend (None: the backend `serves` the kind by itself);
        `fused`: HF model type -> the family's fused decode implementation on this backend (loaded);
        `fused_support`: () -> {backend name: model types with a fused implementation, over every family} (the
        registry's; only `check_fused_decode`'s message reads it, so a backend never imports the registry)."""
        from NNDF.backends.onnxrt.export import ExportSpec

        self.task = task
        self.spec = spec if spec is not None else ExportSpec()
        self.adapter_class = adapter
        self.fused = dict(fused or {})
        self.fused_support = fused_support or dict

    @classmethod
    @abstractmethod
    def availability(cls, options: dict | None = None) -> tuple[bool, str]:
        """(usable here, why or what): `options` maps option-group classes to the values given (or is None)."""

    @abstractmethod
    def setup(self, run: "RunContext"):
        """The step functions for this run (`GenerativeSteps`, `EncoderDecoderSteps` for an encoder-decoder,
        `ForwardSteps` for an encoder)."""

    made: str | None = None  # after `build`: "yes" (built now), "reused" (current in the working dir), "your files"

    def build(self, run: "RunContext") -> list:
        """Prepare the run's artifacts (exports, engines) without running the model; results to report (none: the
        action's own row, from `made` and `model_bytes`)."""
        return []

    @property
    def label(self) -> str:
        """The backend's name in result tables (a variant adds what differs: `onnxrt-int8`)."""
        return self.name

    def variants(self, run: "RunContext") -> list["Backend"]:
        """The backends this one stands for in a run, one result row each (onnxrt: one per `--quantize` value)."""
        return [self]

    def export_notes(self) -> tuple[str, ...]:
        """More export diagnostics for the action's notes (a quantized graph's agreement with the float one)."""
        return ()

    def torch_threads(self, run: "RunContext") -> int | None:
        """torch's CPU threads while this backend's steps run (None: as the run set them)."""
        return None

    def model_bytes(self) -> int | None:
        """Bytes on disk of the model files the last `setup` runs (graphs and their external data; None: not
        files of this backend's own)."""
        return None

    def step_bytes(self) -> int | None:
        """Bytes of those model files one generation step reads (the kind's `Task.step_parts`; None as
        `model_bytes`); onnxrt counts the tensors in its graphs."""
        return self.model_bytes()

    def fused_decode_types(self) -> tuple[str, ...]:
        """HF model types (`config.model_type`) this backend runs the family's fused decode implementation for
        under `--fused-decode` (the family's `BackendFacts.fused`). Read only by `check_fused_decode`."""
        return tuple(self.fused)

    def check_fused_decode(self, model_type: str) -> None:
        """Refuse `--fused-decode`, in one line, where this backend has no fused step for the run's model type,
        naming the backends and model types that have one. `open_run` calls it once the model type is known."""
        if model_type in self.fused_decode_types():
            return
        from NNDF.errors import UsageError

        having = self.fused_support()
        where = "; ".join(f"{name}: {', '.join(types)}" for name, types in having.items()) or "none"
        raise UsageError(f"--fused-decode: the {self.name} backend has no fused decode step for model type "
                         f"{model_type!r} (fused steps exist for {where}); drop --fused-decode")

    def export_max_diff(self) -> float | None:
        """Export diagnostics: max |logits - PyTorch| of the run's exported graph when it was validated (None:
        this backend exports nothing)."""
        return None

    @classmethod
    def serves(cls, task) -> bool:
        """Whether this backend runs a kind that names no adapter for it (the kinds that name one always run)."""
        return False

    def check_device(self, device_type: str | None, options: dict | None = None) -> None:
        """Refuse, in one line, a backend that cannot run here (`availability` with the run's option groups:
        what is missing) or on the device asked for (`device_type`: "cpu", "cuda", or None before the default
        is chosen). `open_run` calls it before anything loads."""
        import torch

        from NNDF.errors import BackendUnavailable, UsageError

        usable, why = self.availability(options)
        no_gpu = "cpu" not in self.devices and not torch.cuda.is_available()
        if not usable:
            if no_gpu and "sees no CUDA GPU" not in why:
                why += (f"; and torch sees no CUDA GPU here (the {self.name} backend runs on "
                        f"{' or '.join(d.upper() for d in self.devices)})")
            lead = "" if why.startswith(f"the {self.name} backend") else f"the {self.name} backend cannot run here: "
            raise BackendUnavailable(lead + why)
        if device_type is not None and device_type not in self.devices:
            raise UsageError(f"the {self.name} backend runs on {' or '.join(d.upper() for d in self.devices)}: "
                             f"use --device {self.devices[0]}")


def option_group(options: dict | None, group: type):
    """The values of one option group from an {group class: values} mapping (its defaults when absent)."""
    value = (options or {}).get(group)
    return value if value is not None else group()


class Adapter:
    """What a kind supplies to one backend (see each backend's adapter contract: `TorchAdapter`, the ONNX artifacts,
    `TrtAdapter`, `TritonAdapter`), built by the backend from the family's export facts and the task."""

    def __init__(self, spec, task):
        self.spec, self.task = spec, task
