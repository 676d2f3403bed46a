"""LLAMA family facts: the Llama-style decoders people run today (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3,
Gemma 1/2 and Gemma 3's text models), their hub variants and the offline ones.

`llama-offline` (the default) is a small Llama trained offline by `tools/assets/make_offline_llama.py` (committed),
with a chat template in its tokenizer config and two end ids in its generation config (end of text, end of turn),
as Llama 3 has. The other offline variants are random-weight models of each architecture with what makes it
differ: Mistral's sliding window (8 columns, shorter than a test's prompt + new tokens), Qwen2's q/k/v biases and
tied embeddings, Qwen3's RMS norms of each head's queries and keys (and a head size other than hidden / heads),
Phi-3's fused qkv and gate_up projections, Gemma's (1 + weight) norms, scaled embeddings and GELU gate, Gemma 2's
norms around attention and the MLP, soft-capped scores and logits and sliding-window layers between full-attention
ones, Gemma 3's second rotary base for its sliding-window layers and norms of each head's queries and keys, and a
Llama with llama3 rope scaling. The Gemmas run on the plain paths (HF's model, the ONNX exports), Gemma 3 also on
its own fused step (`LLAMA/fused_gemma.py`); the Llama-style fused step and the graph built from the weights are
for the other model types (`FUSED_TYPES`: `LLAMA/fused_decode.py`, `LLAMA/fused_onnx.py`).
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.offline import SHARED_TOKENIZERS, decoder_token_ids
from CausalLM.task import CAUSAL_LM

HERE = Path(__file__).resolve().parent
BPE_TOKENIZER_DIR = SHARED_TOKENIZERS / "byte-bpe"
# the shape every random variant shares: 2 layers, 4 query heads over 2 key/value heads (grouped-query attention)
SHAPE = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, max_position_embeddings=256)


def _llama3_config(tok):
    from transformers import LlamaConfig

    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    return LlamaConfig(**SHAPE, **_rope(LlamaConfig, rope), **decoder_token_ids(tok))


def _mistral_config(tok):
    from transformers import MistralConfig

    return MistralConfig(**SHAPE, sliding_window=8, **decoder_token_ids(tok))


def _qwen2_config(tok):
    from transformers import Qwen2Config

    return Qwen2Config(**SHAPE, tie_word_embeddings=True, **decoder_token_ids(tok))


def _qwen3_config(tok):
    from transformers import Qwen3Config

    # a head size (32) other than hidden / heads (16), as Qwen3's own (e.g. 1024 / 16 heads of 128)
    return Qwen3Config(**SHAPE, head_dim=32, tie_word_embeddings=True, **decoder_token_ids(tok))


def _gemma_config(tok):
    from transformers import GemmaConfig

    return GemmaConfig(**SHAPE, head_dim=32, **decoder_token_ids(tok))


def _gemma2_config(tok):
    from transformers import Gemma2Config

    # a sliding-window layer (8 columns: shorter than a test's prompt + new tokens) then a full-attention one; scores
    # and logits soft-capped (Gemma 2's 50 and 30)
    return Gemma2Config(**SHAPE, head_dim=32, sliding_window=8, **decoder_token_ids(tok))


def _gemma3_config(tok):
    from transformers import Gemma3TextConfig

    # a local layer (window 8, shorter than a test's prompt + new tokens; rotary base 10000) then a global one (base
    # 1e6); head size 32, not hidden / heads; scores scaled by query_pre_attn_scalar's 256, not the head size
    shape = {**SHAPE, "head_dim": 32, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}
    return Gemma3TextConfig(**shape, **decoder_token_ids(tok))


def _phi3_config(tok):
    from transformers import Phi3Config

    return Phi3Config(**SHAPE, **decoder_token_ids(tok))


def _rope(config_class, rope: dict) -> dict:
    """The rope settings as this transformers version's config takes them (`rope_parameters` from 5.x on, else
    `rope_theta` + `rope_scaling`)."""
    if "rope_parameters" in config_class().to_dict():
        return {"rope_parameters": rope}
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    return {"rope_theta": rope["rope_theta"], "rope_scaling": scaling}


# the model types with the Llama-style fused decode step (LLAMA/fused_decode.py) and a graph built from the weights
# (LLAMA/fused_onnx.py): all but the Gemmas, whose (1 + weight) norms, scaled embeddings and GELU gate (Gemma 2 and
# 3: norms around attention and the MLP; 2: soft caps; 3: a second rotary base) neither implements (Gemma 3 has a
# fused step of its own, LLAMA/fused_gemma.py)
FUSED_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3")

FAMILY = Family(
    name="LLAMA",
    task=CAUSAL_LM,
    description="Llama-style decoders (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma 1/2/3)",
    model_types=("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2", "gemma3_text"),
    refused_types={
        "qwen3_moe": "mixture-of-experts layers and RMS norms of each head's queries and keys",
        "mixtral": "mixture-of-experts layers",
        "gemma3": "the image encoder of Gemma 3's multimodal models (4B and up; the family runs the text-only "
                  "gemma3_text checkpoints, such as gemma-3-1b)",
    },
    default_variant="llama-offline",
    checkpoint=HERE / "checkpoint.toml",
    variants=(
        Variant("llama-offline", "trained offline", local_dir=HERE / "offline" / "llama-offline"),
        Variant("llama3-offline", "random, tiny", random=RandomWeights(_llama3_config, BPE_TOKENIZER_DIR, seed=11)),
        Variant("mistral-offline", "random, tiny", random=RandomWeights(_mistral_config, BPE_TOKENIZER_DIR, seed=12)),
        Variant("qwen2-offline", "random, tiny", random=RandomWeights(_qwen2_config, BPE_TOKENIZER_DIR, seed=13)),
        Variant("qwen3-offline", "random, tiny", random=RandomWeights(_qwen3_config, BPE_TOKENIZER_DIR, seed=15)),
        Variant("phi3-offline", "random, tiny", random=RandomWeights(_phi3_config, BPE_TOKENIZER_DIR, seed=14)),
        Variant("gemma-offline", "random, tiny", random=RandomWeights(_gemma_config, BPE_TOKENIZER_DIR, seed=17)),
        Variant("gemma2-offline", "random, tiny", random=RandomWeights(_gemma2_config, BPE_TOKENIZER_DIR, seed=18)),
        Variant("gemma3-offline", "random, tiny", random=RandomWeights(_gemma3_config, BPE_TOKENIZER_DIR, seed=16)),
        Variant("meta-llama/Llama-3.2-1B", "1.2B"),
        Variant("meta-llama/Llama-3.2-1B-Instruct", "1.2B"),
        Variant("meta-llama/Llama-3.2-3B", "3.2B"),
        Variant("meta-llama/Llama-3.2-3B-Instruct", "3.2B"),
        Variant("meta-llama/Llama-3.1-8B", "8B"),
        Variant("meta-llama/Llama-3.1-8B-Instruct", "8B"),
        Variant("meta-llama/Llama-2-7b-hf", "6.7B"),
        Variant("mistralai/Mistral-7B-v0.3", "7.2B"),
        Variant("mistralai/Mistral-7B-Instruct-v0.3", "7.2B"),
        Variant("Qwen/Qwen2.5-0.5B", "0.5B"),
        Variant("Qwen/Qwen2.5-0.5B-Instruct", "0.5B"),
        Variant("Qwen/Qwen2.5-1.5B", "1.5B"),
        Variant("Qwen/Qwen2.5-1.5B-Instruct", "1.5B"),
        Variant("Qwen/Qwen2.5-7B", "7.6B"),
        Variant("Qwen/Qwen2.5-7B-Instruct", "7.6B"),
        Variant("Qwen/Qwen3-0.6B", "0.6B"),
        Variant("Qwen/Qwen3-1.7B", "1.7B"),
        Variant("Qwen/Qwen3-4B", "4.0B"),
        Variant("Qwen/Qwen3-8B", "8.2B"),
        Variant("microsoft/Phi-3-mini-4k-instruct", "3.8B"),
        Variant("google/gemma-2b", "2.5B"),
        Variant("google/gemma-2-2b", "2.6B"),
        Variant("google/gemma-2-2b-it", "2.6B"),
        Variant("google/gemma-3-1b-pt", "1.0B"),
        Variant("google/gemma-3-1b-it", "1.0B"),
        Variant("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "1.1B"),
    ),
)
