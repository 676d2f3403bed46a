"""What an encoder run computes on top of the encoder (`Head`, chosen per checkpoint or by --task) and how a
sentence embedding pools the tokens (`Pooling`). Kept apart from the task so the kind's modules (model, export,
adapters) need not import the task that names them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Head:
    """What a run computes on top of the encoder."""

    name: str  # the --task spelling
    auto_class: str  # the transformers class that loads the encoder with this head
    architecture: str | None  # suffix of `config.architectures` entries that carry the head (None: any encoder)
    per_token: bool = False  # one output row per token (token classification)

    @property
    def output(self) -> str:
        """The graph's output name (every backend's)."""
        return "logits" if self.architecture else "embeddings"


HEADS = {h.name: h for h in (
    Head("feature-extraction", "AutoModel", None),
    Head("text-classification", "AutoModelForSequenceClassification", "ForSequenceClassification"),
    Head("token-classification", "AutoModelForTokenClassification", "ForTokenClassification", per_token=True),
)}


@dataclass(frozen=True)
class Pooling:
    """Sentence-embedding pooling: over the tokens the mask keeps (mean or max), or the first token (cls)."""

    mode: str = "mean"  # mean | cls | max
    normalize: bool = False  # L2-normalize the pooled vector (sentence-transformers' Normalize module)
    declared_by: str = "the default for a bare encoder: no sentence-transformers modules.json"
