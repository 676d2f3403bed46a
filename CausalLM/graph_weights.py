"""A checkpoint's weights for the graph builders (`CausalLM.fused_graph`): `StateDict` hands out tensors by the
model's state-dict names, read from the checkpoint's safetensors files one tensor at a time (`SafetensorsFile`:
plain reads into a buffer of that tensor's size, no memory map, so the build's resident memory stays about one
tensor however large the checkpoint) or from a loaded PyTorch model.

The safetensors layout read here is the format's whole definition: an 8-byte little-endian header length, a JSON
header {name: {dtype, shape, data_offsets: [begin, end]}} (offsets from the end of the header), then the data.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from NNDF.errors import ArtifactError

# safetensors dtype names -> torch dtypes (floats as stored; integer buffers of old checkpoints are skipped or refused)
_TORCH = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


class SafetensorsFile:
    """One safetensors file's tensor names, and each tensor read on request into memory of its own."""

    def __init__(self, path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            self.header = json.loads(f.read(size))
        self.header.pop("__metadata__", None)
        self.start = 8 + size

    def keys(self):
        return self.header.keys()

    def numel(self, key: str) -> int:
        return int(np.prod(self.header[key]["shape"], dtype=np.int64))

    def read(self, key: str) -> torch.Tensor:
        info = self.header[key]
        begin, end = info["data_offsets"]
        data = np.empty(end - begin, dtype=np.uint8)
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.start + begin)
            if f.readinto(memoryview(data)) != end - begin:
                raise ArtifactError(f"{self.path} is truncated: tensor {key} ends past the file")
        if info["dtype"] not in _TORCH:
            raise ArtifactError(f"{self.path}: tensor {key} has dtype {info['dtype']}, which the graph builders do "
                                f"not read (they read {', '.join(_TORCH)})")
        return torch.frombuffer(data, dtype=_TORCH[info["dtype"]]).reshape(info["shape"]) if data.size else \
            torch.empty(info["shape"], dtype=_TORCH[info["dtype"]])


class StateDict:
    """A checkpoint's tensors by the model's state-dict names, each read and converted to a numpy array in the
    graph's float type (`dtype`: fp32 or fp16; bf16 checkpoints go through fp32) when asked: a whole 20B checkpoint
    converted at once would not fit beside the graph being built. `check_all_used` fails on any stored tensor the
    graph left out: a checkpoint with parts a builder does not model must not build a graph without them. Built from
    the checkpoint's safetensors files (`of_files`: read tensor by tensor, no PyTorch model) or from a loaded model
    (`of_model`)."""

    def __init__(self, read: Callable, names, family: str, aliases: dict[str, str] | None = None,
                 dtype=np.float32):
        self.read = read  # stored name -> torch tensor
        self.names = frozenset(names)  # the stored names
        self.aliases = dict(aliases or {})  # a tied weight's other name -> its stored name
        self.family = family
        self.dtype = torch.float16 if np.dtype(dtype) == np.float16 else torch.float32
        self.used: set[str] = set()

    @classmethod
    def of_model(cls, model, family: str, dtype=np.float32) -> "StateDict":
        tensors = model.state_dict()
        return cls(tensors.__getitem__, tensors, family, dtype=dtype)

    @classmethod
    def of_files(cls, arch, files: list, family: str, dtype=np.float32) -> "StateDict":
        """The tensors of `files` (safetensors) named as `arch`'s state dict names them: a name stored without the
        model's base prefix (`transformer.`, `model.`, ...) gets it, a tied weight stored once answers to all its
        names, a name HF renames when loading (`_hf_renames`: an old head name such as `embed_out` for `lm_head`)
        gets the model's; stored tensors HF itself ignores when loading (`_keys_to_ignore_on_load_unexpected`, old
        checkpoints' per-layer `rotary_emb.inv_freq` and `position_ids` where the model has such buffers: constants)
        are skipped, any other unknown one is kept so `check_all_used` names it."""
        import re

        expected = set(arch.state_dict())
        prefix = getattr(arch, "base_model_prefix", "")
        buffers = [name for name, _ in arch.named_buffers()]
        ignored = [re.compile(p) for p in getattr(arch, "_keys_to_ignore_on_load_unexpected", None) or ()]
        ignored += [re.compile(p) for p, suffix in ((r"rotary_emb\.inv_freq", "rotary_emb.inv_freq"),
                                                    (r"(^|\.)position_ids$", "position_ids"))
                    if any(b.endswith(suffix) for b in buffers)]
        renames = _hf_renames(arch)
        where: dict[str, tuple] = {}
        for path in files:
            handle = SafetensorsFile(path)
            for stored in handle.keys():
                key = next((k for k in (re.sub(s, t, stored) for s, t in renames) if k in expected), stored)
                name = key if key in expected or f"{prefix}.{key}" not in expected else f"{prefix}.{key}"
                if name in expected or not any(p.search(key) for p in ignored):
                    where[name] = (handle, stored)
        aliases = {}
        groups: dict[int, list[str]] = {}
        for name, param in arch.named_parameters(remove_duplicate=False):
            groups.setdefault(id(param), []).append(name)
        for names in groups.values():
            stored = [n for n in names if n in where]
            for name in names:
                if name not in where and stored:
                    aliases[name] = stored[0]
                elif name not in where:
                    raise ArtifactError(f"the checkpoint ({', '.join(str(f) for f in files[:2])}) has no tensor "
                                        f"{name}, which the {family} model has")
        return cls(lambda name: where[name][0].read(where[name][1]), where, family, aliases, dtype)

    def __contains__(self, name: str) -> bool:
        return name in self.names or name in self.aliases

    def __call__(self, name: str) -> np.ndarray:
        stored = self.aliases.get(name, name)
        self.used.add(stored)
        return self.read(stored).detach().to(self.dtype).cpu().numpy()

    def optional(self, name: str) -> np.ndarray | None:
        """The weight `name`, or None where the checkpoint has none (an optional bias)."""
        return self(name) if name in self else None

    def check_all_used(self) -> None:
        unused = sorted(self.names - self.used)
        if unused:
            raise ArtifactError(f"the {self.family} fused graph does not use {len(unused)} weights of this "
                                f"checkpoint ({', '.join(unused[:4])}...): it cannot model it; leave --fused-decode out")


def _hf_renames(arch) -> list[tuple[str, str]]:
    """(pattern, replacement) of the plain key renames HF applies when it loads `arch`'s checkpoints (transformers 5's
    conversion mapping; none in 4.x)."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming
    except ImportError:
        return []
    return [(source, rename.target_patterns[0]) for rename in get_model_conversion_mapping(arch)
            if type(rename) is WeightRenaming and len(rename.target_patterns) == 1 for source in rename.source_patterns]


def checkpoint_files(folder) -> list:
    """The safetensors files of a local model folder (sharded or not); [] where it has none."""
    from pathlib import Path

    return sorted(Path(folder).glob("*.safetensors")) if folder else []
