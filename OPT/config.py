"""OPT family facts: variants from the seed and a random-weight offline default."""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.offline import SHARED_TOKENIZERS, decoder_token_ids
from CausalLM.task import CAUSAL_LM

HERE = Path(__file__).resolve().parent
BPE_TOKENIZER_DIR = SHARED_TOKENIZERS / "byte-bpe"


def _offline_config(tok):
    from transformers import OPTConfig

    return OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                     word_embed_proj_dim=64, max_position_embeddings=256, **decoder_token_ids(tok))


FAMILY = Family(
    name="OPT",
    task=CAUSAL_LM,
    description="Meta OPT decoders",
    model_types=("opt",),
    default_variant="opt-offline",
    checkpoint=HERE / "checkpoint.toml",
    variants=(
        Variant("opt-offline", "random, tiny", random=RandomWeights(_offline_config, BPE_TOKENIZER_DIR, seed=4)),
        Variant("facebook/opt-125m", "125M"),
        Variant("facebook/opt-350m", "350M"),
        Variant("facebook/opt-1.3b", "1.3B"),
        Variant("facebook/opt-2.7b", "2.7B"),
        Variant("facebook/opt-6.7b", "6.7B"),
        Variant("facebook/opt-13b", "13B"),
    ),
)
