"""GPT2 on ONNX Runtime: this family's export facts and its fused decode graph (`--fused-decode`,
one builder per HF model type: GPT2/export.py's `FUSED_DECODE`). The kind's adapter (CausalLM/) does the rest."""
from GPT2.export import EXPORT, FUSED_DECODE
from NNDF.family import BackendFacts

BACKEND = BackendFacts(EXPORT, fused=FUSED_DECODE)
