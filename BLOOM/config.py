"""BLOOM family facts: variants from the seed and a random-weight offline default.

BLOOM uses ALiBi instead of position ids; the shared backends detect that from the model's forward
signature, and transformers 5 keeps its KV cache in the common [batch, heads, seq, head_dim] layout.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.offline import SHARED_TOKENIZERS, decoder_token_ids
from CausalLM.task import CAUSAL_LM

HERE = Path(__file__).resolve().parent
BPE_TOKENIZER_DIR = SHARED_TOKENIZERS / "byte-bpe"


def _offline_config(tok):
    from transformers import BloomConfig

    return BloomConfig(n_layer=2, hidden_size=64, n_head=4, **decoder_token_ids(tok))


_SIZES = {"560m": "560M", "1b1": "1.1B", "1b7": "1.7B", "3b": "3B", "7b1": "7.1B"}

FAMILY = Family(
    name="BLOOM",
    task=CAUSAL_LM,
    description="BigScience BLOOM and BLOOMZ decoders",
    model_types=("bloom",),
    default_variant="bloom-offline",
    checkpoint=HERE / "checkpoint.toml",
    variants=(
        Variant("bloom-offline", "random, tiny", random=RandomWeights(_offline_config, BPE_TOKENIZER_DIR, seed=5)),
        *(Variant(f"bigscience/bloom-{s}", p) for s, p in _SIZES.items()),
        *(Variant(f"bigscience/bloomz-{s}", p) for s, p in _SIZES.items()),
    ),
)
