"""The registry: which families and backends exist. Registration is this explicit list, not a glob.

A family is a package with `config.py` defining `FAMILY`; it supports a backend when it has a module of that
name (`GPT2/onnxrt.py`) defining `BACKEND`. Heavy imports happen only when a backend is used.
"""
from __future__ import annotations

import importlib
import importlib.util

from NNDF.errors import UnknownChoice, UsageError
from NNDF.family import Family

FAMILY_PACKAGES = ("GPT2", "OPT", "BLOOM", "T5", "BART", "BLIP")
BACKEND_NAMES = ("frameworks", "onnxrt", "trt")


def families() -> dict[str, Family]:
    return {name: importlib.import_module(f"{name}.config").FAMILY for name in FAMILY_PACKAGES}


def family(name: str) -> Family:
    table = families()
    if name not in table:
        raise UnknownChoice("model family", name, table)
    return table[name]


def backends_of(fam: Family) -> list[str]:
    """Backends this family has a module for, in CLI order."""
    return [b for b in BACKEND_NAMES if importlib.util.find_spec(f"{fam.name}.{b}") is not None]


def backend(fam: Family, name: str):
    if name not in BACKEND_NAMES:
        raise UnknownChoice("backend", name, BACKEND_NAMES)
    if name not in backends_of(fam):
        raise UsageError(f"backend {name!r} is not implemented for {fam.name} yet; "
                         f"available: {', '.join(backends_of(fam))}")
    return importlib.import_module(f"{fam.name}.{name}").BACKEND
