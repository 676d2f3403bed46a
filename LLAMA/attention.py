"""What a LLAMA-family config says about its attention, as HF's modeling code of each model type reads it: the
rope settings, the head size, the query and key heads' norms and each layer's sliding window. The family's fused
torch step (fused_decode.py) and fused ONNX Runtime graph (fused_onnx.py) both read them here."""
from __future__ import annotations

from NNDF.errors import UsageError

# rope types whose frequencies are fixed, so a cos/sin table computed once covers every position ("dynamic" and
# "longrope" change them with the sequence length)
FIXED_ROPE = ("default", "linear", "llama3", "yarn")


def rope_parameters(config) -> dict:
    """The rope settings (transformers 5: `rope_parameters`; 4.x: `rope_scaling`, None for plain RoPE)."""
    return dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})


def rope_type(config) -> str:
    rope = rope_parameters(config)
    return rope.get("rope_type", rope.get("type", "default"))


def rope_types(config) -> list[str]:
    """Every rope type the config uses: its one, or each layer type's where the settings go by layer type (Gemma 3's
    sliding-window and full-attention layers)."""
    rope = rope_parameters(config)
    layer_types = sorted(set(getattr(config, "layer_types", None) or ()))
    by_layer = [rope[t] for t in layer_types if isinstance(rope.get(t), dict)]
    return [r.get("rope_type", r.get("type", "default")) for r in by_layer] or [rope_type(config)]


def check_fixed_rope(config) -> None:
    """Refuse, in one line, a config whose rope frequencies change with the sequence length (a fused step computes
    its cos/sin table once)."""
    for kind in rope_types(config):
        if kind not in FIXED_ROPE:
            raise UsageError(f"--fused-decode: rope type {kind!r} changes its frequencies with the sequence length, "
                             "which the fused step's precomputed table does not; drop --fused-decode")


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
