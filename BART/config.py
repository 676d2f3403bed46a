"""BART family facts: the TensorRT HuggingFace demo's BART and mBART-50 variants and two random-weight offline defaults.

`bart-offline` uses a byte-level BPE trained offline with BART's special ids (<s> 0, <pad> 1, </s> 2 = decoder
start) and has a deeper decoder than encoder (3 vs 2 layers), so code that reads one depth for both fails its
tests. `mbart-offline` uses an mBART-50-style tokenizer (sentencepiece unigram + the 52 language codes; see
BART/offline/mbart-tokenizer/README.md for why not BPE) and forces German (de_DE) as the first generated token,
as mBART-50 translation does. Both tokenizers are made by tools/assets/make_offline_seq2seq_tokenizers.py.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from NNDF.model_config import ConfigNames
from Seq2Seq.task import SEQ2SEQ_LM

HERE = Path(__file__).resolve().parent
BART_TOKENIZER_DIR = HERE / "offline" / "bart-tokenizer"
MBART_TOKENIZER_DIR = HERE / "offline" / "mbart-tokenizer"


def _sizes() -> dict:
    return dict(d_model=64, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
                encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=256)


def _bart_config(tok):
    from transformers import BartConfig

    return BartConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                      eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.eos_token_id,
                      forced_eos_token_id=None, **_sizes())


def _mbart_config(tok):
    from transformers import MBartConfig

    return MBartConfig(vocab_size=len(tok), bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.eos_token_id,
                       forced_eos_token_id=None, scale_embedding=True, **_sizes())


def _mbart_generation(tok) -> dict:
    """mBART-50 generates in the target language: its code is forced as the first token (HF keeps this in the
    generation config; transformers 5's MBartConfig drops it from the model config)."""
    return {"forced_bos_token_id": tok.convert_tokens_to_ids("de_DE")}


FAMILY = Family(
    name="BART",
    task=SEQ2SEQ_LM,
    description="Meta BART and mBART-50 encoder-decoders",
    model_types=("bart", "mbart"),
    default_variant="bart-offline",
    checkpoint=HERE / "checkpoint.toml",
    config_names=ConfigNames(decoder_layers="decoder_layers"),  # num_hidden_layers is the encoder's depth
    cross_kv=("encoder_attn.k_proj", "encoder_attn.v_proj"),
    variants=(
        Variant("bart-offline", "random, tiny", random=RandomWeights(_bart_config, BART_TOKENIZER_DIR, seed=21)),
        Variant("mbart-offline", "random, tiny", random=RandomWeights(_mbart_config, MBART_TOKENIZER_DIR, seed=22,
                                                                     make_generation=_mbart_generation)),
        Variant("facebook/bart-base", "139M"),
        Variant("facebook/bart-large", "406M"),
        Variant("facebook/bart-large-cnn", "406M"),
        Variant("facebook/mbart-large-50", "680M"),
    ),
)
