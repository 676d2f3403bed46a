"""BERT on PyTorch: this family's export facts (the kind's adapter does the rest)."""
from BERT.export import EXPORT
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT)
