"""LLAMA on PyTorch: the family's fused decode step (`--fused-decode`, every model type of the family). The kind's
adapter (CausalLM/) does the rest."""
from LLAMA.config import FAMILY
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={t: "LLAMA.fused_decode:FusedLlamaStep" for t in FAMILY.model_types})
