"""The registry: which families and backends exist. Registration is these explicit tables, not a glob.

- A family is a package whose `config.py` defines `FAMILY` (`NNDF.family.Family`); it supports a backend when it
  has a module of that name (`GPT2/onnxrt.py`) defining `BACKEND` (`FAMILY.task.backend("onnxrt", EXPORT)`), or
  when the backend's class `serves` the family's task (a backend added later needs no file in every family; it is
  bound to the family's `export.py` facts).
- A backend is one `BACKENDS` line: its class (`NNDF.backends.base.Backend`) and the option groups it owns
  (flags only it reads). Classes and options are named as "module:attribute" strings and imported when used,
  so `--help` and argument errors never import torch, ONNX Runtime or TensorRT.
- Actions are registered in `NNDF.actions.ACTIONS`.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass

from NNDF.errors import UnknownChoice, UsageError
from NNDF.family import Family

FAMILY_PACKAGES = ("GPT2", "OPT", "BLOOM", "T5", "BART", "BLIP", "BERT")


@dataclass(frozen=True)
class BackendEntry:
    target: str  # "module:Class" of the backend (a `Backend` subclass)
    options: tuple[str, ...] = ()  # "module:Class" of each option group the backend owns


BACKENDS: dict[str, BackendEntry] = {
    "frameworks": BackendEntry("NNDF.backends.frameworks:FrameworksBackend"),
    "onnxrt": BackendEntry("NNDF.backends.onnxrt:OnnxRuntimeBackend", ("NNDF.backends.ort_options:ORTOptions",)),
    "trt": BackendEntry("NNDF.backends.trt:TensorRTBackend", ("NNDF.backends.trt_options:TRTOptions",)),
    "triton": BackendEntry("NNDF.triton.backend:TritonBackend", ("NNDF.triton.options:TritonOptions",)),
}


def load(target: str):
    """The object a "module:attribute" string names."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def backend_class(name: str):
    """The registered class of backend `name` (availability, and the class a task uses unless it names its own)."""
    if name not in BACKENDS:
        raise UnknownChoice("backend", name, BACKENDS)
    return load(BACKENDS[name].target)


def backend_option_groups() -> list[type]:
    """Every option group owned by a registered backend, in registry order."""
    return [load(target) for entry in BACKENDS.values() for target in entry.options]


def families() -> dict[str, Family]:
    return {name: importlib.import_module(f"{name}.config").FAMILY for name in FAMILY_PACKAGES}


def family(name: str) -> Family:
    table = families()
    if name not in table:
        raise UnknownChoice("model family", name, table)
    return table[name]


def _has_module(fam: Family, name: str) -> bool:
    return importlib.util.find_spec(f"{fam.name}.{name}") is not None


def backends_of(fam: Family) -> list[str]:
    """Backends this family runs on, in registry order."""
    return [b for b in BACKENDS if _has_module(fam, b) or backend_class(b).serves(fam.task)]


def export_spec(fam: Family):
    """The family's export facts (`<family>/export.py`'s `EXPORT`; the defaults where it has none)."""
    if _has_module(fam, "export"):
        return importlib.import_module(f"{fam.name}.export").EXPORT
    return None


def backend(fam: Family, name: str):
    """The family's bound backend `name`: its `<family>/<name>.py` module's `BACKEND`, else the task's binding."""
    backend_class(name)  # an unknown name lists the valid ones
    if name not in backends_of(fam):
        raise UsageError(f"backend {name!r} is not implemented for {fam.name} yet; "
                         f"available: {', '.join(backends_of(fam))}")
    if _has_module(fam, name):
        return importlib.import_module(f"{fam.name}.{name}").BACKEND
    return fam.task.backend(name, export_spec(fam))


def fused_decode_support() -> dict[str, tuple[str, ...]]:
    """Backend name -> the model types it has a fused decode step for (`Backend.fused_decode_types`), over every
    family's bound backends; backends with none are left out."""
    support: dict[str, set[str]] = {}
    for fam in families().values():
        for name in backends_of(fam):
            support.setdefault(name, set()).update(backend(fam, name).fused_decode_types())
    return {name: tuple(sorted(types)) for name, types in support.items() if types}
