"""LLAMA on TensorRT: this family's export facts (the kind's adapter does the rest)."""
from LLAMA.export import EXPORT
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT)
