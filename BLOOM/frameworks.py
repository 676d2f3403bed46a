"""BLOOM on PyTorch: the family's fused decode step (`--fused-decode`, BLOOM/fused_decode.py). The kind's adapter
(CausalLM/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"bloom": "BLOOM.fused_decode:FusedBloomStep"})
