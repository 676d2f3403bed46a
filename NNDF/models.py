"""Where a model comes from: a local folder (`--torch-dir`), an offline variant, or the HuggingFace Hub.

`resolve_source` finds the config and tokenizer without loading weights (ONNX Runtime and TensorRT runs
with a current artifact never need the PyTorch weights); `load_torch_model` loads them when needed. A local
folder is always read with `local_files_only=True`, so it never touches the network. Hub failures become one
line that suggests `--torch-dir` or the family's offline default. `trust_remote_code` is passed through only
when the user asked for it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from NNDF.errors import ModelLoadError
from NNDF.family import Family, Variant
from NNDF.offline import materialize


@dataclass(frozen=True)
class ModelSource:
    family: Family
    variant: str
    location: str  # local folder or hub id, as passed to from_pretrained
    local_dir: Path | None  # set when `location` is a local folder
    config: object  # transformers.PretrainedConfig
    trust_remote_code: bool = False

    @property
    def num_layers(self) -> int:
        return int(self.config.num_hidden_layers)


def _hub_error(family: Family, location: str, exc: Exception) -> ModelLoadError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ModelLoadError(
        f"could not load {location!r} ({reason[:160]}); the HuggingFace Hub may be unreachable: use "
        f"--torch-dir DIR for a local HF folder, or the offline default --variant {family.default_variant}"
    )


def resolve_source(family: Family, variant_name: str, torch_dir: str | None, working_dir: Path,
                   trust_remote_code: bool = False) -> ModelSource:
    from transformers import AutoConfig

    variant: Variant = family.variant(variant_name)
    local_dir = None
    if torch_dir:
        local_dir = Path(torch_dir)
        if not (local_dir / "config.json").is_file():
            raise ModelLoadError(f"--torch-dir {torch_dir!r} is not a HuggingFace model folder (no config.json)")
    elif variant.offline:
        local_dir = materialize(family, variant, working_dir)
    location = str(local_dir) if local_dir else variant.name
    try:
        config = AutoConfig.from_pretrained(location, local_files_only=local_dir is not None,
                                            trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        if local_dir is not None:
            raise ModelLoadError(f"cannot read the model config in {location!r}: {exc}") from None
        raise _hub_error(family, location, exc) from None
    if config.model_type not in family.model_types:
        raise ModelLoadError(
            f"{location!r} is a {config.model_type!r} model; family {family.name} runs "
            f"{', '.join(family.model_types)}"
        )
    name = f"local:{Path(torch_dir).name}" if torch_dir else variant.name
    return ModelSource(family, name, location, local_dir, config, trust_remote_code)


def load_tokenizer(source: ModelSource):
    """The model's tokenizer, left padding (decoder-only batches), pad = EOS when the model has no pad."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(source.location, local_files_only=source.local_dir is not None,
                                            trust_remote_code=source.trust_remote_code)
    except (OSError, ValueError) as exc:
        if source.local_dir is not None:
            raise ModelLoadError(f"cannot read a tokenizer in {source.location!r}: {exc}") from None
        raise _hub_error(source.family, source.location, exc) from None
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_torch_model(source: ModelSource, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(
            source.location, dtype=dtype, local_files_only=source.local_dir is not None,
            trust_remote_code=source.trust_remote_code,
        )
    except (OSError, ValueError) as exc:
        if source.local_dir is not None:
            raise ModelLoadError(f"cannot load weights from {source.location!r}: {exc}") from None
        raise _hub_error(source.family, source.location, exc) from None
    return model.to(device).eval()


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
