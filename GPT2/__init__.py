"""GPT2 family: GPT-2, GPT-Neo, GPT-NeoX, GPT-J and Cerebras-GPT (decoder-only causal LMs)."""
