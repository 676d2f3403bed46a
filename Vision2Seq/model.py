"""`ImageTextAdapter`: an HF image-captioning model (BLIP: `vision_model` + `text_decoder`) in the encoder-decoder
shape that Seq2Seq's steps and exports use: `get_encoder()(pixel_values=...)` gives the image embeddings and
`forward(encoder_outputs=, attention_mask=, decoder_input_ids=, past_key_values=, use_cache=)` runs the text
decoder with cross-attention to them. The text decoder keeps HF's own `EncoderDecoderCache` (self-attention
grows per step, the image's cross-attention keys/values are filled on the first step), exactly as T5/BART do.
Nothing is copied from the model: the adapter only renames arguments.
"""
from __future__ import annotations

from types import SimpleNamespace

import torch


class ImageTextAdapter(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        text, vision = model.config.text_config, model.config.vision_config
        # the facts Seq2Seq reads (`Seq2Seq.export.Layout`, example inputs), under its names
        self.config = SimpleNamespace(decoder_layers=text.num_hidden_layers, decoder_start_token_id=text.bos_token_id,
                                      d_model=vision.hidden_size, vocab_size=text.vocab_size,
                                      image_size=vision.image_size)

    def get_encoder(self) -> torch.nn.Module:
        return self.model.vision_model  # pixel_values -> last_hidden_state [B, patches + 1, hidden]

    def forward(self, encoder_outputs, decoder_input_ids, attention_mask=None, past_key_values=None,
                use_cache=False):
        return self.model.text_decoder(input_ids=decoder_input_ids,
                                       encoder_hidden_states=encoder_outputs.last_hidden_state,
                                       encoder_attention_mask=attention_mask, past_key_values=past_key_values,
                                       use_cache=use_cache)
