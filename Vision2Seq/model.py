"""`ImageTextAdapter`: an HF image-captioning model (BLIP: `vision_model` + `text_decoder`) in the encoder-decoder
shape that Seq2Seq's steps and exports use: `get_encoder()(pixel_values=...)` gives the image embeddings and
`forward(encoder_outputs=, attention_mask=, decoder_input_ids=, past_key_values=, use_cache=)` runs the text
decoder with cross-attention to them. The text decoder keeps HF's own `EncoderDecoderCache` (self-attention
grows per step, the image's cross-attention keys/values are filled on the first step), exactly as T5/BART do.
Nothing is copied from the model: the adapter only renames arguments. `config` is the model's own HF config
(composite: `text_config`, `vision_config`), as on any HF model; Seq2Seq reads no fields of it (its export
takes the decoder depth and hidden size from an example pass, the vocabulary from `ModelDims`), and the image
encoder's example inputs (`Vision2Seq.backends.IMAGE_ENCODER`) read the image size from `vision_config`.
"""
from __future__ import annotations

import torch


class ImageTextAdapter(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.config = model.config

    def get_encoder(self) -> torch.nn.Module:
        return self.model.vision_model  # pixel_values -> last_hidden_state [B, patches + 1, hidden]

    def forward(self, encoder_outputs, decoder_input_ids, attention_mask=None, past_key_values=None,
                use_cache=False):
        return self.model.text_decoder(input_ids=decoder_input_ids,
                                       encoder_hidden_states=encoder_outputs.last_hidden_state,
                                       encoder_attention_mask=attention_mask, past_key_values=past_key_values,
                                       use_cache=use_cache)
