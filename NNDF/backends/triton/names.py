"""Triton model names: the name deploy gives a model, which is also the name the `triton` client backend asks for
by default (`--triton-model`), and the check of a name given by the user; and what a deployed model serves
(`serves`: the parameters deploy writes into its config, which the client backend compares with its run's)."""
from __future__ import annotations

import re

from NNDF.errors import UsageError


def model_name(*parts: str) -> str:
    """A Triton model name from family / variant / backend: lower case, [a-z0-9_.-], words joined by '-'."""
    text = "-".join(p for p in parts if p).lower().replace("/", "--")
    name = re.sub(r"[^a-z0-9_.-]+", "-", text).strip(".-")
    if not name:
        raise UsageError("--model-name: give a name of letters, digits, '_', '.' or '-'")
    return name


def default_model_name(family: str, variant: str, backend: str) -> str:
    """deploy's name for a model (and the triton backend's --triton-model default): <variant>-<backend>, with the
    family in front when the variant's name does not start with it (local folders, hub ids)."""
    lead = () if variant.lower().startswith(family.lower()) else (family,)
    return model_name(*lead, variant, backend)


def serves(run) -> dict[str, str]:
    """What a model deployed from `run` serves: its family and HF model type (config parameters; generative
    models also record them in serving.json)."""
    return {"family": run.family.name, "model_type": str(run.source.config.model_type)}


def check_model_name(name: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        raise UsageError(f"--model-name {name!r}: use letters, digits, '_', '.' and '-' (not starting with '.' or "
                         "'-')")
    return name
