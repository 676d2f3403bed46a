"""GPT2 on PyTorch: its task's frameworks backend, with the fused decode step of GPT-2 proper (`--fused-decode`;
GPT-Neo, GPT-NeoX and GPT-J have none)."""
from GPT2.config import FAMILY

BACKEND = FAMILY.task.backend("frameworks").with_fused_decode({"gpt2": "GPT2.fused_decode:FusedGPT2Step"})
