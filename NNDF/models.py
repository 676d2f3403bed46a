"""Where a model comes from: a local folder (`--torch-dir`), an offline variant, or the HuggingFace Hub.

`resolve_source` finds the config and tokenizer without loading weights (ONNX Runtime and TensorRT runs
with a current artifact never need the PyTorch weights); `load_torch_model` loads them when needed. A local
folder is always read with `local_files_only=True`, so it never touches the network; its artifacts are cached
under `local:<name>-<digest of its resolved path>`, or `local:<--variant>` when --variant labels it. A hub id is
loaded only after one quick check that the hub answers (NNDF/hub.py): when it does not, the id comes from the
local HF cache (said once) or fails in one line. Hub failures become one line that suggests `--torch-dir` or the
family's offline default (all its offline variants for a name it does not declare: perhaps a typo). A model of
another architecture (its config.json's `model_type`, read as plain JSON when transformers cannot load it) is
refused naming the types the family runs. `trust_remote_code` is passed through only when the user asked for it.
"""
from __future__ import annotations

import json
import logging
import pickle
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from NNDF import hub
from NNDF.artifacts import digest
from NNDF.errors import ModelLoadError, WrongModelType
from NNDF.family import ROOT, Family, Variant
from NNDF.integrity import damaged_file, embedding_rows
from NNDF.model_config import ModelDims
from NNDF.offline import materialize

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSource:
    family: Family
    variant: str
    location: str  # local folder or hub id, as passed to from_pretrained
    local_dir: Path | None  # set when `location` is a local folder
    config: object  # transformers.PretrainedConfig
    trust_remote_code: bool = False
    repair: str = ""  # what to do when a file of the local folder is damaged
    cache_only: bool = False  # a hub id read from the local HF cache only (the hub is unreachable)

    @property
    def files_only(self) -> bool:
        """Never ask the network: a local folder, or a hub id whose hub is unreachable."""
        return self.local_dir is not None or self.cache_only

    @cached_property
    def dims(self) -> ModelDims:
        """The normalized view of the config (layers, heads, hidden size, vocabulary, position table)."""
        return ModelDims.of(self.config, self.family.config_names)

    @cached_property
    def generation(self):
        """The model's HF GenerationConfig (generation_config.json, else derived from config.json): where
        `decoder_start_token_id` and `forced_bos_token_id` come from, as in HF `generate`. A local folder's
        generation_config.json that cannot be read is refused, not replaced by config.json's defaults (its EOS ids
        and sampling defaults would silently change)."""
        from transformers import GenerationConfig

        if self.local_dir is not None and (self.local_dir / "generation_config.json").is_file():
            return _from_pretrained(GenerationConfig, self.family, self.location, True, "the generation settings",
                                    self.trust_remote_code, self.repair)
        try:
            return GenerationConfig.from_pretrained(self.location, local_files_only=self.files_only)
        except (OSError, ValueError):  # none in the folder, or none on the hub for this model
            return GenerationConfig.from_model_config(self.config)


def _hub_error(family: Family, location: str, exc: Exception) -> ModelLoadError:
    return ModelLoadError(f"could not load {location!r} ({_first_line(exc)}); the HuggingFace Hub may be unreachable: "
                          f"use --torch-dir DIR for a local HF folder, or {_offline_hint(family, location)}")


def _offline_hint(family: Family, name: str) -> str:
    """What to run instead of hub id `name`: the offline default for a declared variant, else (perhaps a mistyped
    name) every offline variant of the family."""
    if family.declares(name):
        return f"the offline default --variant {family.default_variant}"
    return f"a {family.name} variant that needs no network: --variant {', '.join(family.offline_variants)}"


def _first_line(exc: Exception, limit: int = 240) -> str:
    """The first line of a library's message; past `limit` characters, its sentences that fit (never cut mid-word)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    line = text.splitlines()[0]
    if len(line) <= limit:
        return line
    kept = ""
    for sentence in re.split(r"(?<=[.;:])\s+", line):
        if len(kept) + len(sentence) + 1 > limit:
            break
        kept = f"{kept} {sentence}".strip()
    return kept or line[:limit].rsplit(" ", 1)[0] + " ..."


def _from_pretrained(cls, family: Family, location: str, local: bool, what: str, trust: bool, repair: str = "",
                     cache_only: bool = False, **kwargs):
    """`cls.from_pretrained` with the errors users can act on: a local folder never touches the network, and
    its damaged files are named (with `repair`: what to do); a hub failure becomes one line pointing to
    --torch-dir and the offline default."""
    from safetensors import SafetensorError

    try:
        return cls.from_pretrained(location, local_files_only=local or cache_only, trust_remote_code=trust, **kwargs)
    except (OSError, ValueError, EOFError, pickle.UnpicklingError, SafetensorError, RuntimeError) as exc:
        damaged = isinstance(exc, (SafetensorError, EOFError, pickle.UnpicklingError))  # a weights file cut short
        if local:
            broken = damaged_file(Path(location))
            if broken:
                raise ModelLoadError(f"cannot read {what}: {broken[0]} is damaged ({broken[1]}); {repair}") from exc
            if isinstance(exc, RuntimeError) and "mismatched_sizes" in str(exc):
                raise ModelLoadError(f"cannot read {what} in {location!r}: {_shape_mismatch(Path(location))}") \
                    from exc
            if isinstance(exc, RuntimeError):  # torch's own errors: not a file problem we can name
                raise
            raise ModelLoadError(f"cannot read {what} in {location!r}: {_first_line(exc)}"
                                 f"{'; ' + repair if damaged else ''}") from exc
        if damaged:
            raise ModelLoadError(f"cannot read {what} of {location!r} ({_first_line(exc)}); its copy in the "
                                 "HuggingFace cache is damaged: delete it there (hf cache delete) and download it "
                                 "again") from exc
        if isinstance(exc, RuntimeError):
            raise
        raise _hub_error(family, location, exc) from exc


def _shape_mismatch(folder: Path) -> str:
    """What disagrees between a folder's config.json and its weights (the vocabulary, where it can be read)."""
    from transformers import AutoConfig

    dims = ModelDims.of(AutoConfig.from_pretrained(folder, local_files_only=True))
    rows = embedding_rows(folder, dims.hidden)
    found = (f"its config.json says vocab_size {dims.vocab}, its weights embed {rows} tokens"
             if rows is not None and rows != dims.vocab else "a size in its config.json disagrees with its weights")
    return f"{found}; use the config.json the weights were saved with"


def _repair_hint(variant: Variant, torch_dir: str | None, local_dir: Path | None) -> str:
    if torch_dir:
        return "replace it with an intact copy of the model (download it again, or save it again with save_pretrained)"
    if variant.local_dir is not None:
        where = variant.local_dir.relative_to(ROOT) if variant.local_dir.is_relative_to(ROOT) else variant.local_dir
        return f"restore the committed offline model (git checkout -- {where})"
    if local_dir is not None:
        return f"delete {local_dir} and run again to rebuild it"
    return ""


def resolve_source(family: Family, variant_name: str | None, torch_dir: str | None, working_dir: Path,
                   trust_remote_code: bool = False) -> ModelSource:
    """Where the model comes from, and its config. `variant_name`: --variant (None: the family's default; with
    `torch_dir`, the label the folder's artifacts are cached under)."""
    from transformers import AutoConfig

    variant: Variant = family.variant(variant_name or family.default_variant)
    local_dir = None
    if torch_dir:
        local_dir = _model_folder(torch_dir)
    elif variant.offline:
        local_dir = materialize(family, variant, working_dir)
    location = str(local_dir) if local_dir else variant.name
    repair = _repair_hint(variant, torch_dir, local_dir)
    cache_only = local_dir is None and _hub_unreachable(family, location)
    try:
        config = _from_pretrained(AutoConfig, family, location, local_dir is not None, "the model config",
                                  trust_remote_code, repair, cache_only)
    except ModelLoadError as exc:  # e.g. a model type transformers does not know: say whose it is
        refusal = _type_refusal(family, location, _declared_type(location, local_dir is not None))
        if refusal is None:
            raise
        raise refusal from exc.__cause__
    if config.model_type not in family.model_types:
        raise WrongModelType(_wrong_type(family, location, config.model_type), config.model_type)
    name = local_label(torch_dir, variant_name) if torch_dir else variant.name
    return ModelSource(family, name, location, local_dir, config, trust_remote_code, repair, cache_only)


def _model_folder(torch_dir: str) -> Path:
    """The --torch-dir folder, refused in one line when it is missing, a file, or holds no config.json."""
    folder = Path(torch_dir)
    if not folder.exists():
        raise ModelLoadError(f"--torch-dir {torch_dir!r} does not exist: give a HuggingFace model folder (one "
                             "written by save_pretrained)")
    if not folder.is_dir():
        raise ModelLoadError(f"--torch-dir {torch_dir!r} is a file, not a folder: give the HuggingFace model folder "
                             "that holds it")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"--torch-dir {torch_dir!r} is not a HuggingFace model folder (no config.json)")
    return folder


def _declared_type(location: str, local: bool) -> str | None:
    """The `model_type` a config.json declares, read as plain JSON (a local folder's, or the local HF cache's copy
    of a hub id's), without transformers resolving it; None when it cannot be read."""
    from huggingface_hub import try_to_load_from_cache

    try:
        path = Path(location) / "config.json" if local else try_to_load_from_cache(location, "config.json")
        declared = json.loads(Path(path).read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, TypeError, AttributeError):  # unreadable, not JSON, not cached, not an object
        return None
    return declared if isinstance(declared, str) else None


def _type_refusal(family: Family, location: str, model_type: str | None) -> ModelLoadError | None:
    """Why a config that failed to load cannot run here, from its declared `model_type`: another architecture than
    the family's, or one of the family's that this transformers does not know (None: neither, or no type)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type is None:
        return None
    known = model_type in CONFIG_MAPPING
    if model_type not in family.model_types:
        unknown = "" if known else f"; transformers {transformers.__version__} does not know it either"
        return WrongModelType(_wrong_type(family, location, model_type) + unknown, model_type)
    if not known:
        return ModelLoadError(f"{location!r} is a {model_type!r} model, which transformers "
                              f"{transformers.__version__} does not know: upgrade it (pip install --upgrade "
                              "transformers)")
    return None


def _wrong_type(family: Family, location: str, model_type: str) -> str:
    """The refusal of a model `family` does not run: with what the family lacks for it, where it says so."""
    runs = f"{location!r} is a {model_type!r} model; family {family.name} runs {', '.join(family.model_types)}"
    if model_type in family.refused_types:
        return f"{runs}; {model_type!r} needs {family.refused_types[model_type]}, which this family does not model"
    return runs


def local_label(torch_dir: str, label: str | None) -> str:
    """The variant name a --torch-dir folder's artifacts are cached under: `local:<--variant>` when one is given,
    else `local:<folder name>-<digest of its resolved path>` (two folders named alike never share artifacts)."""
    if label:
        return f"local:{label}"
    resolved = Path(torch_dir).resolve()
    return f"local:{resolved.name}-{digest(str(resolved))[:8]}"


def _hub_unreachable(family: Family, hub_id: str) -> bool:
    """True when `hub_id` must come from the local HF cache because the hub cannot be reached (said once, as a
    warning); one line when it is not cached either. False under HF_HUB_OFFLINE (the libraries read the cache)."""
    from huggingface_hub import try_to_load_from_cache

    why = None if hub.offline() else hub.unreachable()
    if why is None:
        return False
    if not isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        raise ModelLoadError(f"the HuggingFace Hub is unreachable ({why}) and {hub_id!r} is not in the local HF "
                             f"cache: use --torch-dir DIR for a local HF folder, or {_offline_hint(family, hub_id)}")
    log.warning("the HuggingFace Hub is unreachable (%s): %s comes from the local HF cache", why, hub_id)
    return True


def load_tokenizer(source: ModelSource):
    """The model's tokenizer, padding on the task's side (decoder-only: left; encoders: right, so learned
    absolute positions do not shift), pad = EOS when the model has no pad."""
    from transformers import AutoTokenizer

    tok = _from_pretrained(AutoTokenizer, source.family, source.location, source.local_dir is not None,
                           "a tokenizer", source.trust_remote_code, source.repair, source.cache_only)
    if source.local_dir is not None:
        _check_tokenizer_files(tok, source.local_dir)
    _check_vocabulary(tok, source)
    tok.padding_side = source.family.task.padding_side
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def _check_vocabulary(tok, source: ModelSource) -> None:
    """A tokenizer with more tokens than the model's embedding has rows (another model's tokenizer, or tokens added
    without resizing the embedding) would fail inside the first forward with an index error: refuse it here."""
    rows = source.dims.vocab
    if len(tok) > rows:
        raise ModelLoadError(f"{source.location}: the tokenizer has {len(tok)} tokens and the model's embedding "
                             f"{rows} rows, so ids {rows}-{len(tok) - 1} cannot run: give the model its own tokenizer "
                             "(or resize the embedding: model.resize_token_embeddings(len(tokenizer)))")


def _check_tokenizer_files(tok, folder: Path) -> None:
    """A folder without tokenizer files still loads a tokenizer (an empty vocabulary that turns every text into no
    tokens): refuse it, naming the files its tokenizer class reads."""
    wanted = [name for name in dict.fromkeys(["tokenizer.json", *getattr(tok, "vocab_files_names", {}).values()])
              if name]
    if not any((folder / name).is_file() for name in wanted):
        raise ModelLoadError(f"{folder} has no tokenizer files (it needs tokenizer.json, or "
                             f"{' and '.join(wanted[1:]) or 'the files its tokenizer reads'}): save the tokenizer "
                             "there too (tokenizer.save_pretrained(DIR))")


def model_architecture(source: ModelSource, class_name: str | None = None) -> torch.nn.Module:
    """The model's structure without its weights: `class_name` (as `load_torch_model`) made from the config on the
    meta device (its config, module attributes and state-dict names; no memory, no weights read)."""
    import transformers

    auto_class = getattr(transformers, class_name or source.family.task.auto_class)
    with torch.device("meta"):
        return auto_class.from_config(source.config, trust_remote_code=source.trust_remote_code)


def load_torch_model(source: ModelSource, dtype: torch.dtype, device: torch.device,
                     class_name: str | None = None) -> torch.nn.Module:
    """The model's weights as `class_name` (a transformers auto class; default: the task's `auto_class`)."""
    import transformers

    auto_class = getattr(transformers, class_name or source.family.task.auto_class)
    model = _from_pretrained(auto_class, source.family, source.location, source.local_dir is not None,
                             "model weights", source.trust_remote_code, source.repair, source.cache_only, dtype=dtype)
    return model.to(device).eval()
