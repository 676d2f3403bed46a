"""LLAMA family facts: the Llama-style decoders people run today (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3),
their hub variants and the offline ones.

`llama-offline` (the default) is a small Llama trained offline by `tools/assets/make_offline_llama.py` (committed),
with a chat template in its tokenizer config and two end ids in its generation config (end of text, end of turn),
as Llama 3 has. The other offline variants are random-weight models of each architecture with what makes it
differ: Mistral's sliding window (8 columns, shorter than a test's prompt + new tokens), Qwen2's q/k/v biases and
tied embeddings, Qwen3's RMS norms of each head's queries and keys (and a head size other than hidden / heads),
Phi-3's fused qkv and gate_up projections, and a Llama with llama3 rope scaling.
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


FAMILY = Family(
    name="LLAMA",
    task=CAUSAL_LM,
    description="Llama-style decoders (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3)",
    model_types=("llama", "mistral", "qwen2", "qwen3", "phi3"),
    refused_types={
        "qwen3_moe": "mixture-of-experts layers and RMS norms of each head's queries and keys",
        "mixtral": "mixture-of-experts layers",
        "gemma": "(1 + weight) RMS norms, embeddings scaled by the hidden size's square root and a GELU gate",
        "gemma2": "Gemma's norms and scaled embeddings, norms after attention and the MLP, and soft-capped scores "
                  "and logits",
        "gemma3_text": "Gemma 2's layout, RMS norms of each head's queries and keys and a second rotary base for "
                       "its local layers",
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
        Variant("TinyLlama/TinyLlama-1.1B-Chat-v1.0", "1.1B"),
    ),
)
