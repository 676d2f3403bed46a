"""BART on ONNX Runtime: this family's export facts (the kind's adapter does the rest)."""
from BART.export import EXPORT, FUSED_DECODE
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT, fused=FUSED_DECODE)
