"""GPT2 on PyTorch: the fused decode step of GPT-2 proper (`--fused-decode`; GPT-Neo, GPT-NeoX and GPT-J
have none). The kind's adapter (CausalLM/) does the rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"gpt2": "GPT2.fused_decode:FusedGPT2Step"})
