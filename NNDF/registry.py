"""The registry: the one place that turns (family, backend) into a runnable backend. Registration is explicit:

- `FAMILIES`: the import list of families, each one `FamilyEntry`: its `Family` (`<family>/config.py`'s `FAMILY`)
  and, per backend, what the family adds there (`<family>/<backend>.py`'s `BACKEND`, a `BackendFacts`: export
  facts, fused decode implementations).
- `BACKENDS`: one `BackendEntry` per backend: its kind-neutral runtime class (`NNDF.backends.base.Backend`) and
  the option groups it owns (flags only it reads).
- Kinds: each kind's `Task.adapters` (in the kind's package: `CausalLM/task.py`, `Seq2Seq/task.py`, ...) names,
  per backend, the adapter that says what the kind exports, validates and runs there. A family runs on a backend
  its kind has an adapter for, or one whose class `serves` the kind by itself.

Every target is a "module:attribute" string, imported by `load` when used (never by anything else), so `--help`
and argument errors import neither torch nor ONNX Runtime nor TensorRT. Actions are registered in
`NNDF.actions.ACTIONS`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from NNDF.errors import UnknownChoice, UsageError
from NNDF.family import BackendFacts, Family


@dataclass(frozen=True)
class FamilyEntry:
    family: str  # "module:FAMILY" (a `NNDF.family.Family`)
    backends: dict[str, str] = field(default_factory=dict)  # backend name -> "module:BACKEND" (a `BackendFacts`)


FAMILIES: dict[str, FamilyEntry] = {  # written out: a reader, an IDE and the contract test follow each target
    "GPT2": FamilyEntry("GPT2.config:FAMILY", {"frameworks": "GPT2.frameworks:BACKEND",
                                              "onnxrt": "GPT2.onnxrt:BACKEND", "trt": "GPT2.trt:BACKEND"}),
    "OPT": FamilyEntry("OPT.config:FAMILY", {"frameworks": "OPT.frameworks:BACKEND",
                                            "onnxrt": "OPT.onnxrt:BACKEND", "trt": "OPT.trt:BACKEND"}),
    "BLOOM": FamilyEntry("BLOOM.config:FAMILY", {"frameworks": "BLOOM.frameworks:BACKEND",
                                                "onnxrt": "BLOOM.onnxrt:BACKEND", "trt": "BLOOM.trt:BACKEND"}),
    "LLAMA": FamilyEntry("LLAMA.config:FAMILY", {"frameworks": "LLAMA.frameworks:BACKEND",
                                                "onnxrt": "LLAMA.onnxrt:BACKEND", "trt": "LLAMA.trt:BACKEND"}),
    "T5": FamilyEntry("T5.config:FAMILY", {"frameworks": "T5.frameworks:BACKEND",
                                          "onnxrt": "T5.onnxrt:BACKEND", "trt": "T5.trt:BACKEND"}),
    "BART": FamilyEntry("BART.config:FAMILY", {"frameworks": "BART.frameworks:BACKEND",
                                              "onnxrt": "BART.onnxrt:BACKEND", "trt": "BART.trt:BACKEND"}),
    "BLIP": FamilyEntry("BLIP.config:FAMILY", {"frameworks": "BLIP.frameworks:BACKEND",
                                              "onnxrt": "BLIP.onnxrt:BACKEND", "trt": "BLIP.trt:BACKEND"}),
    "BERT": FamilyEntry("BERT.config:FAMILY", {"frameworks": "BERT.frameworks:BACKEND",
                                              "onnxrt": "BERT.onnxrt:BACKEND", "trt": "BERT.trt:BACKEND"}),
}
FAMILY_PACKAGES = tuple(FAMILIES)  # the registered families' names (help texts, the contract test)


@dataclass(frozen=True)
class BackendEntry:
    target: str  # "module:Class" of the backend (a `Backend` subclass)
    options: tuple[str, ...] = ()  # "module:Class" of each option group the backend owns


BACKENDS: dict[str, BackendEntry] = {
    "frameworks": BackendEntry("NNDF.backends.torch.backend:FrameworksBackend"),
    "onnxrt": BackendEntry("NNDF.backends.onnxrt.backend:OnnxRuntimeBackend",
                           ("NNDF.backends.onnxrt.options:ORTOptions",)),
    "trt": BackendEntry("NNDF.backends.trt.backend:TensorRTBackend", ("NNDF.backends.trt.options:TRTOptions",)),
    "triton": BackendEntry("NNDF.backends.triton.backend:TritonBackend",
                           ("NNDF.backends.triton.options:TritonOptions",)),
}


def load(target: str):
    """The object a "module:attribute" string names (the one loader of every registered target)."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def backend_class(name: str):
    """The registered class of backend `name` (its availability, and the runtime every kind's adapter plugs into)."""
    if name not in BACKENDS:
        raise UnknownChoice("backend", name, BACKENDS)
    return load(BACKENDS[name].target)


def backend_option_groups() -> list[type]:
    """Every option group owned by a registered backend, in registry order."""
    return [load(target) for entry in BACKENDS.values() for target in entry.options]


def families() -> dict[str, Family]:
    return {name: load(entry.family) for name, entry in FAMILIES.items()}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise UnknownChoice("model family", name, FAMILIES)
    return load(FAMILIES[name].family)


def family_of_variant(name: str) -> Family | None:
    """The registered family that declares variant `name` (None: none does)."""
    return next((fam for fam in families().values() if fam.declares(name)), None)


def family_of_type(model_type: str) -> Family | None:
    """The registered family that runs HF model type `model_type` (None: none does)."""
    return next((fam for fam in families().values() if model_type in fam.model_types), None)


def backends_of(fam: Family) -> list[str]:
    """Backends this family runs on, in registry order: its kind has an adapter there, or the backend serves the
    kind by itself."""
    return [b for b in BACKENDS if b in fam.task.adapters or backend_class(b).serves(fam.task)]


def facts(fam: Family, name: str) -> BackendFacts:
    """What the family adds on backend `name` (its `<family>/<name>.py`'s `BACKEND`; none declared: nothing)."""
    target = FAMILIES[fam.name].backends.get(name) if fam.name in FAMILIES else None
    return load(target) if target else BackendFacts()


def backend(fam: Family, name: str):
    """The family's bound backend `name`: the backend's class with the kind's adapter and the family's facts."""
    cls = backend_class(name)  # an unknown name lists the valid ones
    if name not in backends_of(fam):
        raise UsageError(f"backend {name!r} is not implemented for {fam.name} yet; "
                         f"available: {', '.join(backends_of(fam))}")
    adapter = fam.task.adapters.get(name)
    declared = facts(fam, name)
    return cls(fam.task, declared.spec, load(adapter) if adapter else None,
               {model_type: load(target) for model_type, target in declared.fused.items()},
               fused_support=fused_decode_support)


def evaluator(task, action: str):
    """The evaluator class that runs `action` for this kind (its `Task.evaluator` target, loaded), or None."""
    target = task.evaluator(action)
    return load(target) if target else None


def fused_decode_support() -> dict[str, tuple[str, ...]]:
    """Backend name -> the model types some family has a fused decode implementation for on it (from every
    family's `BackendFacts.fused`); backends with none are left out."""
    support: dict[str, set[str]] = {}
    for fam in families().values():
        for name in backends_of(fam):
            support.setdefault(name, set()).update(facts(fam, name).fused)
    return {name: tuple(sorted(types)) for name, types in support.items() if types}
