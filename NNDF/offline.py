"""Offline variants: models that need no network, for the README demo, the tests and air-gapped machines.

A variant is either a committed HF folder (GPT2's small trained model) or random weights from a config and a
fixed seed, materialised on first use as an artifact under the working directory (rebuilt if the recipe
changes). Random variants share the byte-level BPE tokenizer trained offline for GPT2's default
(`tools/make_offline_gpt2.py`), so their text is decodable.
"""
from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np

from NNDF.artifacts import ArtifactStore, digest, file_digest
from NNDF.errors import ModelLoadError
from NNDF.family import ROOT, Family, RandomWeights, Variant

OFFLINE_TOKENIZER_DIR = ROOT / "GPT2" / "offline" / "gpt2-offline"
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def materialize(family: Family, variant: Variant, working_dir: Path) -> Path:
    """A local HF folder for an offline variant (built once, reused while its recipe is unchanged)."""
    if variant.local_dir is not None:
        if not (variant.local_dir / "config.json").is_file():
            raise ModelLoadError(f"offline model {variant.local_dir} is missing; rebuild it with tools/make_offline_gpt2.py")
        return variant.local_dir
    return _random_model(family, variant, working_dir)


def _recipe(variant: Variant) -> dict:
    spec: RandomWeights = variant.random
    tok = {name: file_digest(OFFLINE_TOKENIZER_DIR / name) for name in _TOKENIZER_FILES}
    return {"config": inspect.getsource(spec.make_config), "seed": spec.seed, "std": spec.std, "tokenizer": tok,
            "recipe_version": 1}


def _random_model(family: Family, variant: Variant, working_dir: Path) -> Path:
    store = ArtifactStore(working_dir, family.name, variant.name)
    fingerprint = {"offline_recipe": digest(_recipe(variant))}
    if not store.is_current("hf-model", fingerprint):
        with store.build("hf-model", fingerprint) as tmp:
            _build_random(variant.random, tmp)
    return store.path("hf-model")


def _build_random(spec: RandomWeights, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(OFFLINE_TOKENIZER_DIR, local_files_only=True)
    eos = tok.eos_token_id
    config = spec.make_config(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    model = AutoModelForCausalLM.from_config(config)
    redraw_weights(model, spec.seed, spec.std)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def redraw_weights(model, seed: int, std: float) -> None:
    """Matrices ~ N(0, std) from numpy's seeded PCG64 (stable across torch versions); vectors untouched."""
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.dim() >= 2:
                values = rng.standard_normal(tuple(param.shape), dtype=np.float32) * std
                param.copy_(torch.from_numpy(values))
