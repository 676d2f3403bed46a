"""What a LLAMA-family config says about its attention, as HF's modeling code of each model type reads it: the
rope settings, the head size, the query and key heads' norms and each layer's sliding window. The family's fused
torch step (fused_decode.py) and fused ONNX Runtime graph (fused_onnx.py) both read them here."""
from __future__ import annotations

# rope types whose frequencies are fixed, so a cos/sin table computed once covers every position ("dynamic" and
# "longrope" change them with the sequence length)
FIXED_ROPE = ("default", "linear", "llama3", "yarn")


def rope_parameters(config) -> dict:
    """The rope settings (transformers 5: `rope_parameters`; 4.x: `rope_scaling`, None for plain RoPE)."""
    return dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})


def rope_type(config) -> str:
    rope = rope_parameters(config)
    return rope.get("rope_type", rope.get("type", "default"))


def head_dim(config) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def head_norms(config) -> bool:
    """Whether each query and key head is RMS-normed before the rotary positions (Qwen3's `q_norm`, `k_norm`)."""
    return config.model_type == "qwen3"


def layer_windows(config) -> list[int | None]:
    """Each layer's sliding window (None: full attention): Qwen2's and Qwen3's per layer (`layer_types`, set when
    `use_sliding_window`), Mistral's and Phi-3's for every layer."""
    layers = config.num_hidden_layers
    if config.model_type in ("qwen2", "qwen3"):
        return [config.sliding_window if kind == "sliding_attention" else None for kind in config.layer_types]
    return [getattr(config, "sliding_window", None) or None] * layers
