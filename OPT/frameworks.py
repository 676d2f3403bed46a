"""OPT on PyTorch: the family's fused decode step (`--fused-decode`, OPT/fused_decode.py). The kind's adapter
(CausalLM/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"opt": "OPT.fused_decode:FusedOPTStep"})
