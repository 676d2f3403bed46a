"""One normalized view of an HF config: the few numbers shared code needs, read in exactly one place.

HF's own standard names (`num_hidden_layers`, `num_attention_heads`, `hidden_size`, `max_position_embeddings`,
`vocab_size`, which every config maps through its `attribute_map`) and `get_text_config(decoder=True)` (the text
decoder of a composite config such as an image-captioning model's) cover almost everything. What they do not
say, a family declares in `ConfigNames` (its `config.py`), e.g. where an encoder-decoder config keeps its
decoder depth. Tasks (position limits), exports and TensorRT profiles read `ModelDims`, never config attributes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ConfigNames:
    """Config attributes that HF's standard names do not cover, declared by a family."""

    decoder_layers: str = "num_hidden_layers"  # encoder-decoder configs keep the decoder's depth elsewhere


@dataclass(frozen=True)
class ModelDims:
    """The decoder's (or the text decoder's) dimensions."""

    layers: int  # decoder layers (decoder-only models: all layers)
    heads: int
    hidden: int
    vocab: int
    positions: int | None  # size of the learned position table; None: relative positions or ALiBi (no table)
    head_dim: int = 0  # per-head size: the config's standard `head_dim` where it has one, else hidden / heads
    kv_heads: int = 0  # key/value heads of the self-attention cache (grouped-query attention: fewer than `heads`)

    @staticmethod
    def of(config, names: ConfigNames = ConfigNames()) -> "ModelDims":
        text = _text_config(config)
        return ModelDims(
            layers=int(getattr(text, names.decoder_layers)),
            heads=int(text.num_attention_heads),
            hidden=int(text.hidden_size),
            vocab=int(text.vocab_size),
            positions=ModelDims.positions_of(config),
            head_dim=_head_dim(text),
            kv_heads=int(getattr(text, "num_key_value_heads", None) or text.num_attention_heads),
        )

    @staticmethod
    def positions_of(config) -> int | None:
        """`positions` alone (the one reader of a position limit; TensorRT profiles need nothing else)."""
        positions = getattr(_text_config(config), "max_position_embeddings", None)
        return positions if isinstance(positions, int) and positions > 0 else None


def _text_config(config):
    """The (text) decoder's config: a composite config's text part, else the config itself (HF's copy of a plain
    config may rename fields, BART's; a bare object without `get_text_config` is taken as it is)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return config if type(text) is type(config) else text


def _head_dim(text) -> int:
    size = getattr(text, "head_dim", None)  # HF's standard name (T5 maps it to d_kv)
    return size if isinstance(size, int) and size > 0 else int(text.hidden_size) // int(text.num_attention_heads)
