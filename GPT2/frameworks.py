"""GPT2 on PyTorch: the family's fused decode steps (`--fused-decode`): GPT-2 proper's (GPT2/fused_decode.py) and
GPT-J's and GPT-NeoX's (GPT2/fused_decode_rotary.py); GPT-Neo has none. The kind's adapter (CausalLM/) does the
rest."""
from NNDF.family import BackendFacts

BACKEND = BackendFacts(fused={"gpt2": "GPT2.fused_decode:FusedGPT2Step",
                              "gptj": "GPT2.fused_decode_rotary:FusedRotaryStep",
                              "gpt_neox": "GPT2.fused_decode_rotary:FusedRotaryStep"})
