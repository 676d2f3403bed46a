"""BLIP's static-cache caption decoder step (`--static-cache` on `frameworks`, HF model type `blip`): the text
decoder of `BlipForConditionalGeneration` (HF's `BlipTextLMHeadModel`) in plain torch ops, for inductor, over the
fixed buffers of a `Seq2Seq.fused_step.Seq2SeqSlot`. The image encoder (`vision_model`) runs as HF's module (the
kind does it); its output, the image embeddings, is what every layer's cross-attention reads.

The layout is the decoder-only fused steps' (OPT/fused_decode.py): an embedding function, ONE layer function called
for every layer with that layer's weights and buffers as arguments (same shapes, so `torch.compile(dynamic=False)`
compiles it once however deep the model is), and a head function. The self-attention cache is one K and one V
buffer [rows, heads, max_length, head_dim] per layer, written in place at `slot.write` (held on the device); the
cross-attention K and V [rows, heads, image_tokens, head_dim] are computed once per image by `cross`.

What it computes, as HF's modeling code does (a BERT-style post-norm decoder): the word embedding plus a learned
absolute position embedding at the decoder position (0..S-1 in the prompt pass, `slot.write` in the one-token
step: HF's `past_key_values_length`), then the embedding layer norm; per layer self-attention (one product for q, k
and v, concatenated once at load; scores scaled by head_dim ** -0.5; one query over the whole buffer masked by
column <= write) -> dense -> add -> layer norm, cross-attention over the image (its key/value projections take
the vision width, `encoder_hidden_size`; masked by `slot.encoder_mask`) -> dense -> add -> layer norm, then
intermediate dense -> activation -> output dense -> add -> layer norm; the LM head is HF's prediction head: dense ->
activation -> layer norm -> the (tied) vocabulary product with its bias. Dropout is off (inference), and the
decoder's `label_smoothing` only concerns the training loss. The products and both attentions take the forms the
step's settings give (`Seq2Seq.fused_step.seq2seq_settings`: on CUDA our Triton GEMV for one row's products and
our attention kernels, cuBLAS for more rows; elsewhere the reduction form for one compiled row, plain-op
attention).

The prompt pass is eager (F.linear and SDPA with a causal mask, writing the same buffers). The concatenated q/k/v
weights are copies: they are held twice while the step lives.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from CausalLM.fused_step import FusedSettings, attend, compiled, layer_norm, product
from NNDF.errors import UsageError
from Seq2Seq.fused_step import Seq2SeqSlot, seq2seq_slot, seq2seq_settings, write_kv
from Vision2Seq.model import ImageTextAdapter

MODEL_TYPES = ("blip",)  # HF model types this step runs (BlipForConditionalGeneration)
ACTIVATIONS = {  # HF's `hidden_act` names this step reproduces exactly -> the torch function
    "gelu": F.gelu,
    "relu": F.relu,
    "gelu_pytorch_tanh": lambda h: F.gelu(h, approximate="tanh"),
    "silu": F.silu,
}


def check_config(config) -> None:
    """Refuse, in one line, a config this step does not reproduce."""
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        raise UsageError(f"--static-cache: model type {config.model_type!r} has no BLIP static-cache step "
                         f"(model types it runs: {', '.join(MODEL_TYPES)})")
    text = config.text_config
    if not isinstance(text.hidden_act, str) or text.hidden_act not in ACTIVATIONS:
        raise UsageError(f"--static-cache: BLIP text activation {text.hidden_act!r} is not one the static-cache "
                         f"step implements ({', '.join(ACTIVATIONS)}); drop --static-cache")
    if not text.is_decoder:
        raise UsageError("--static-cache: the BLIP text model is not a decoder (is_decoder false: no "
                         "cross-attention to the image); drop --static-cache")
    if text.hidden_size % text.num_attention_heads:
        raise UsageError(f"--static-cache: BLIP text hidden size {text.hidden_size} is not a multiple of its "
                         f"{text.num_attention_heads} heads; drop --static-cache")


def layer_step(x, w: tuple, keys, values, cross_keys, cross_values, write, image_last, valid, image, *, heads: int,
               eps: float, scale: float, act: str, forms: tuple, attention: tuple):
    """One BLIP text layer for one token per row: x [R, E] -> [R, E]; writes this token's K/V at `write` [1].
    cross_keys/values [R, H, image_tokens, D]; valid [R, L] (columns <= write); image [R, image_tokens] (bool; up
    to `image_last` [1]). `forms`: `product`'s form for q/k/v, the self-attention's output dense, the
    cross-attention's query and output dense, the intermediate and output dense; `attention`:
    `CausalLM.fused_step.attend`'s for the self- and the cross-attention."""
    (qkv_w, qkv_b, self_w, self_b, norm1, query_w, query_b, cross_w, cross_b, norm2, up_w, up_b, down_w, down_b,
     norm3) = w
    qkv_form, self_form, query_form, cross_form, up_form, down_form = forms
    rows, embed = x.shape
    head_dim = embed // heads
    qkv = product(x, qkv_w, qkv_b, qkv_form)
    q, k, v = (t.reshape(rows, heads, head_dim) for t in qkv.split(embed, dim=-1))
    keys, values = write_kv(keys, values, k, v, write)
    a = attend(attention[0], q, keys, values, write, valid, scale).reshape(rows, embed)
    x = layer_norm(product(a, self_w, self_b, self_form) + x, norm1, eps)
    q = product(x, query_w, query_b, query_form).reshape(rows, heads, head_dim)
    a = attend(attention[1], q, cross_keys, cross_values, image_last, image, scale).reshape(rows, embed)
    x = layer_norm(product(a, cross_w, cross_b, cross_form) + x, norm2, eps)
    h = ACTIVATIONS[act](product(x, up_w, up_b, up_form))
    return layer_norm(product(h, down_w, down_b, down_form) + x, norm3, eps)


def embed_step(ids, write, encoder_mask, words, positions, norm: tuple, eps: float, max_length: int):
    """The step's embedding [R, E] (word + position at `write`, layer norm), which decoder columns it attends to
    [R, L] and which image tokens [R, image_tokens]."""
    columns = torch.arange(max_length, device=ids.device)
    x = layer_norm(words[ids[:, 0]] + positions[write], norm, eps)
    return x, (columns <= write).expand(ids.shape[0], max_length), encoder_mask != 0


def head_step(x, w: tuple, eps: float, act: str, forms: tuple):
    """The step's logits [R, 1, V] (`head`)."""
    return head(x, w, eps, act, forms)[:, None, :]


def head(x, w: tuple, eps: float, act: str, forms: tuple = (0, 0)):
    """HF's prediction head: dense -> activation -> layer norm -> vocabulary product + bias: [..., E] -> [..., V].
    `forms`: `product`'s form for the dense and the vocabulary product."""
    dense_w, dense_b, norm, vocab_w, vocab_b = w
    h = layer_norm(ACTIVATIONS[act](product(x, dense_w, dense_b, forms[0])), norm, eps)
    return product(h, vocab_w, vocab_b, forms[1])


class FusedBlipStep:
    """The static-cache decoder step of a loaded HF `BlipForConditionalGeneration` (`Seq2Seq.fused_step.
    FusedSeq2SeqStep`): `new_slot`, `cross` (the image's cross-attention K/V), `prefill` (the decoder prompt) and
    `one_token` (the step a CUDA graph captures). `compile_options`: inductor options to compile the step's three
    functions with (`{}`: inductor's defaults), or None to run them eagerly; `settings`: the step's internal
    choices (`Seq2Seq.fused_step.seq2seq_settings`)."""

    def __init__(self, model: torch.nn.Module, compile_options: dict | None = None,
                 settings: FusedSettings | None = None):
        if isinstance(model, ImageTextAdapter):  # the kind's wrapper: the HF model inside
            model = model.model
        check_config(model.config)
        text = model.config.text_config
        self.settings, self.compiled = seq2seq_settings(settings), compile_options is not None
        self.heads, self.width, self.act = text.num_attention_heads, text.hidden_size, text.hidden_act
        self.head_dim = text.hidden_size // text.num_attention_heads
        self.scale, self.eps = self.head_dim ** -0.5, text.layer_norm_eps
        bert, predictions = model.text_decoder.bert, model.text_decoder.cls.predictions
        embeddings = bert.embeddings
        self.words = embeddings.word_embeddings.weight.detach()
        self.positions = embeddings.position_embeddings.weight.detach()  # [max_position_embeddings, E]
        self.embed_norm, self.embed_eps = _norm(embeddings.LayerNorm), embeddings.LayerNorm.eps
        self.layers = [_layer_weights(layer) for layer in bert.encoder.layer]
        self.cross_weights = [_cross_weights(layer) for layer in bert.encoder.layer]
        transform = predictions.transform
        self.head_weights = (transform.dense.weight.detach(), _detach(transform.dense.bias),
                             _norm(transform.LayerNorm), predictions.decoder.weight.detach(),
                             _detach(predictions.decoder.bias))
        self.dtype, self.device = self.words.dtype, self.words.device
        self._embed, self._layer, self._head = compiled((embed_step, layer_step, head_step), compile_options)

    def new_slot(self, rows: int, max_length: int, encoder_length: int) -> Seq2SeqSlot:
        """Empty buffers for this decoder (`seq2seq_slot`); at most `max_position_embeddings` decoder positions."""
        if max_length > self.positions.shape[0]:
            raise UsageError(f"--static-cache: {max_length} decoder positions exceed the BLIP text decoder's "
                             f"{self.positions.shape[0]} (max_position_embeddings); ask for fewer new tokens")
        return seq2seq_slot(rows, max_length, encoder_length, len(self.layers), self.heads, self.head_dim,
                            self.dtype, self.device)

    def cross(self, hidden: torch.Tensor, slot: Seq2SeqSlot) -> None:
        """Every layer's cross-attention K/V of the image embeddings hidden [R, image_tokens, vision width]."""
        rows, length = hidden.shape[:2]
        hidden = hidden.to(self.dtype)
        for i, weights in enumerate(self.cross_weights):
            for buffer, (weight, bias) in zip(slot.cross[2 * i:2 * i + 2], weights):
                projected = F.linear(hidden, weight, bias)  # [R, image_tokens, E]
                buffer.copy_(projected.reshape(rows, length, self.heads, self.head_dim).transpose(1, 2))

    def one_token(self, slot: Seq2SeqSlot) -> torch.Tensor:
        """Logits [R, 1, V] of `slot.ids` at decoder position `slot.write`, its K/V written there."""
        rows, settings = slot.rows, self.settings
        w = self.layers[0]
        forms = settings.forms(rows, self.compiled, self.width, self.device, w[0], w[2], w[5], w[7], w[10], w[12])
        head_forms = (settings.form(rows, self.compiled, self.width, self.width, self.device),
                      settings.head_form(rows, self.compiled, self.width, self.device))
        attention = (settings.attention_on(self.device, slot.max_length, self.head_dim, rows=rows),
                     settings.attention_on(self.device, slot.encoder_length, self.head_dim, rows=rows))
        x, valid, image = self._embed(slot.ids, slot.write, slot.encoder_mask, self.words, self.positions,
                                      self.embed_norm, eps=self.embed_eps, max_length=slot.max_length)
        past = slot.layer_buffers(settings.paired_kv_write)
        for weights, keys, values, cross_keys, cross_values in zip(self.layers, *past, slot.cross[0::2],
                                                                   slot.cross[1::2]):
            x = self._layer(x, weights, keys, values, cross_keys, cross_values, slot.write, slot.encoder_last, valid,
                            image, heads=self.heads, eps=self.eps, scale=self.scale, act=self.act, forms=forms,
                            attention=attention)
        return self._head(x, self.head_weights, eps=self.eps, act=self.act, forms=head_forms)

    def prefill(self, input_ids: torch.Tensor, slot: Seq2SeqSlot, last_only: bool) -> torch.Tensor:
        """The decoder prompt input_ids [R, S] at positions 0..S-1, eager: logits [R, S or 1, V]; its K/V written
        to columns 0..S-1 of `slot.past`."""
        length = input_ids.shape[1]
        x = self.words[input_ids] + self.positions[:length]
        x = layer_norm(x, self.embed_norm, self.embed_eps)  # [R, S, E]
        image = (slot.encoder_mask != 0)[:, None, None, :]  # [R, 1, 1, image_tokens]
        for i, weights in enumerate(self.layers):
            x = self._prompt_layer(x, weights, slot.past[2 * i:2 * i + 2], slot.cross[2 * i:2 * i + 2], image)
        if last_only:
            x = x[:, -1:]
        return head(x, self.head_weights, self.eps, self.act)

    def _prompt_layer(self, x, w: tuple, past: list, cross: list, image):
        (qkv_w, qkv_b, self_w, self_b, norm1, query_w, query_b, cross_w, cross_b, norm2, up_w, up_b, down_w,
         down_b, norm3) = w
        rows, length, embed = x.shape
        q, k, v = (t.reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)
                   for t in F.linear(x, qkv_w, qkv_b).split(embed, dim=-1))  # each [R, H, S, D]
        past[0][:, :, :length] = k
        past[1][:, :, :length] = v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)
        x = layer_norm(F.linear(_merge(a), self_w, self_b) + x, norm1, self.eps)
        q = F.linear(x, query_w, query_b).reshape(rows, length, self.heads, self.head_dim).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, cross[0], cross[1], attn_mask=image, scale=self.scale)
        x = layer_norm(F.linear(_merge(a), cross_w, cross_b) + x, norm2, self.eps)
        h = ACTIVATIONS[self.act](F.linear(x, up_w, up_b))
        return layer_norm(F.linear(h, down_w, down_b) + x, norm3, self.eps)


def _merge(a: torch.Tensor) -> torch.Tensor:
    """Attention output [R, H, S, D] -> [R, S, H * D]."""
    rows, heads, length, head_dim = a.shape
    return a.transpose(1, 2).reshape(rows, length, heads * head_dim)


def _detach(t):
    return None if t is None else t.detach()


def _norm(norm) -> tuple:
    """A layer norm's (gain, bias)."""
    return _detach(norm.weight), _detach(norm.bias)


def _layer_weights(layer) -> tuple:
    """One layer's weights as the layer function takes them: self-attention q, k and v as one [3E, E] product."""
    attn, cross = layer.attention, layer.crossattention
    parts = (attn.self.query, attn.self.key, attn.self.value)
    qkv_w = torch.cat([p.weight.detach() for p in parts])
    qkv_b = torch.cat([p.bias.detach() for p in parts])
    return (qkv_w, qkv_b, attn.output.dense.weight.detach(), _detach(attn.output.dense.bias),
            _norm(attn.output.LayerNorm), cross.self.query.weight.detach(), _detach(cross.self.query.bias),
            cross.output.dense.weight.detach(), _detach(cross.output.dense.bias), _norm(cross.output.LayerNorm),
            layer.intermediate.dense.weight.detach(), _detach(layer.intermediate.dense.bias),
            layer.output.dense.weight.detach(), _detach(layer.output.dense.bias), _norm(layer.output.LayerNorm))


def _cross_weights(layer) -> tuple:
    """One layer's cross-attention key and value projections ((weight [E, vision width], bias), twice)."""
    attn = layer.crossattention.self
    return (attn.key.weight.detach(), _detach(attn.key.bias)), (attn.value.weight.detach(), _detach(attn.value.bias))
