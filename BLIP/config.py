"""BLIP family facts: the TensorRT HuggingFace demo's captioning variants and a random-weight offline default.

`blip-offline` uses the WordPiece tokenizer and the 32x32 image processor made offline in
BLIP/offline/blip-processor (tools/assets/make_offline_blip.py; BLIP's id layout: [PAD] 0, [SEP] ends a caption,
[DEC] is the decoder's BOS) and a tiny vision tower (8-pixel patches: 16 patches + CLS). Test images:
BLIP/offline/images/.
"""
from __future__ import annotations

from pathlib import Path

from NNDF.family import Family, RandomWeights, Variant
from Vision2Seq.task import IMAGE_TO_TEXT

HERE = Path(__file__).resolve().parent
PROCESSOR_DIR = HERE / "offline" / "blip-processor"


def _offline_config(tok):
    from transformers import BlipConfig

    text = dict(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                max_position_embeddings=64, bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                sep_token_id=tok.sep_token_id, eos_token_id=tok.sep_token_id)
    vision = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, image_size=32,
                  patch_size=8)
    return BlipConfig(text_config=text, vision_config=vision)


FAMILY = Family(
    name="BLIP",
    task=IMAGE_TO_TEXT,
    description="Salesforce BLIP image captioning",
    model_types=("blip",),
    default_variant="blip-offline",
    checkpoint=HERE / "checkpoint.toml",
    cross_kv=("crossattention.self.key", "crossattention.self.value"),
    variants=(
        Variant("blip-offline", "random, tiny", random=RandomWeights(_offline_config, PROCESSOR_DIR, seed=31)),
        Variant("Salesforce/blip-image-captioning-base", "247M"),
        Variant("Salesforce/blip-image-captioning-large", "470M"),
    ),
)
