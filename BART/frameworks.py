"""BART and mBART on PyTorch: the family's static-cache decoder step (`--static-cache`, BART/fused_decode.py). The
kind's adapter (Seq2Seq/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"bart": "BART.fused_decode:FusedBartStep", "mbart": "BART.fused_decode:FusedBartStep"})
