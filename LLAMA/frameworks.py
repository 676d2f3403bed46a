"""LLAMA on PyTorch: nothing family-specific (the kind's adapter runs the HF model)."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts()
