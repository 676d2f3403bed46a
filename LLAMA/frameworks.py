"""LLAMA on PyTorch: the family's fused decode step (`--fused-decode`, every model type but the Gemmas':
`FUSED_TYPES`). The kind's adapter (CausalLM/) does the rest."""
from LLAMA.config import FUSED_TYPES
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={t: "LLAMA.fused_decode:FusedLlamaStep" for t in FUSED_TYPES})
