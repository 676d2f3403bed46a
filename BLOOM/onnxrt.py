"""BLOOM on ONNX Runtime: this family's export facts and its fused decode graph (`--fused-decode`: BLOOM/export.py's
`FUSED_DECODE`). The kind's adapter does the rest."""
from BLOOM.export import EXPORT, FUSED_DECODE
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT, fused=FUSED_DECODE)
