"""BLIP on PyTorch: the text decoder's static-cache step (`--static-cache`, BLIP/fused_decode.py). The kind's adapter
(Vision2Seq/, Seq2Seq/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"blip": "BLIP.fused_decode:FusedBlipStep"})
