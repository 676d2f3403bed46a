"""LLAMA family: Llama 2/3, Mistral, Qwen2/2.5, Qwen3 and Phi-3 (decoder-only causal LMs with RMSNorm, rotary
positions, grouped-query attention and a gated MLP)."""
