"""T5 family facts: the TensorRT HuggingFace demo's T5 and flan-T5 variants and two random-weight offline defaults.

The offline variants use a sentencepiece unigram tokenizer trained offline (T5/offline/t5-tokenizer, made by
tools/assets/make_offline_seq2seq_tokenizers.py) with T5's id layout (pad 0 = decoder start, eos 1, unk 2, 100
sentinels). `t5-offline` has T5's ReLU feed-forward and tied, rescaled LM head; `flan-t5-offline` has
flan-T5's gated-GELU feed-forward and untied head.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.model_config import ConfigNames
from Seq2Seq.task import SEQ2SEQ_LM

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE / "offline" / "t5-tokenizer"


def _config(tok, feed_forward: str, tied: bool):
    from transformers import T5Config

    # equal encoder and decoder depth: transformers 5.23's own T5 generate sizes its cache by the encoder depth
    return T5Config(vocab_size=len(tok), d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                    num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=32,
                    feed_forward_proj=feed_forward, tie_word_embeddings=tied, pad_token_id=tok.pad_token_id,
                    eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id)


def _t5_config(tok):
    return _config(tok, "relu", True)


def _flan_config(tok):
    return _config(tok, "gated-gelu", False)


FAMILY = Family(
    name="T5",
    task=SEQ2SEQ_LM,
    description="Google T5 and flan-T5 encoder-decoders",
    model_types=("t5",),
    default_variant="t5-offline",
    checkpoint=HERE / "checkpoint.toml",
    config_names=ConfigNames(decoder_layers="num_decoder_layers"),  # num_hidden_layers is the encoder's depth
    cross_kv=("EncDecAttention.k", "EncDecAttention.v"),
    variants=(
        Variant("t5-offline", "random, tiny", random=RandomWeights(_t5_config, TOKENIZER_DIR, seed=11)),
        Variant("flan-t5-offline", "random, tiny", random=RandomWeights(_flan_config, TOKENIZER_DIR, seed=12)),
        Variant("t5-small", "60M"),
        Variant("t5-base", "220M"),
        Variant("t5-large", "770M"),
        Variant("t5-3b", "3B"),
        Variant("t5-11b", "11B"),
        Variant("google/flan-t5-small", "60M"),
        Variant("google/flan-t5-base", "220M"),
        Variant("google/flan-t5-large", "770M"),
        Variant("google/flan-t5-xl", "3B"),
        Variant("google/flan-t5-xxl", "11B"),
    ),
)
