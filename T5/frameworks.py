"""T5 on PyTorch: the family's static-cache decoder step (`--static-cache`, T5/fused_decode.py). The kind's adapter
(Seq2Seq/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"t5": "T5.fused_decode:FusedT5Step"})
