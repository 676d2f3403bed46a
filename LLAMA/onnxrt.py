"""LLAMA on ONNX Runtime: this family's export facts and its fused decode graph (`--fused-decode`: LLAMA/export.py's
`FUSED_DECODE`). The kind's adapter (CausalLM/) does the rest."""
from LLAMA.export import EXPORT, FUSED_DECODE
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT, fused=FUSED_DECODE)
