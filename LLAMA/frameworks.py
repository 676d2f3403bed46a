"""LLAMA on PyTorch: the family's fused decode steps (`--fused-decode`): the Llama-style one for `FUSED_TYPES`
(LLAMA/fused_decode.py), Gemma 3's (LLAMA/fused_gemma.py). The kind's adapter (CausalLM/) does the rest."""
from LLAMA.config import FUSED_TYPES
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={**{t: "LLAMA.fused_decode:FusedLlamaStep" for t in FUSED_TYPES},
                              "gemma3_text": "LLAMA.fused_gemma:FusedGemmaStep"})
