"""The model names of one encoder deployment (`deploy BERT ...` writes them; the `triton` client backend asks the
python flavour, `<base>_model_python`, by default)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Names:
    """The model names of one deployment."""

    base: str

    @property
    def tokenize(self) -> str:
        return f"{self.base}_tokenize"

    @property
    def model(self) -> str:
        return f"{self.base}_model"

    @property
    def model_python(self) -> str:
        return f"{self.base}_model_python"

    @property
    def ensemble(self) -> str:
        return self.base

    @property
    def ensemble_python(self) -> str:
        return f"{self.base}_python"

    @property
    def all(self) -> tuple[str, ...]:
        return self.tokenize, self.model, self.model_python, self.ensemble, self.ensemble_python
