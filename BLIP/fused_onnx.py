"""BLIP's caption decoder graphs for ONNX Runtime (HF model_type "blip": BlipForConditionalGeneration's text decoder,
HF's `BlipTextLMHeadModel`), built from the HF weights with `Seq2Seq.fused_graph` and `CausalLM.fused_graph`. The
image encoder (`vision_model`) stays the plain torch.onnx export: this builder makes the "cross" and "decoder"
parts only.

    cross:   every layer's crossattention key and value of the image embeddings (their projections take the vision
             width, `encoder_hidden_size`), heads first
    decoder: h = LayerNorm(word_embeddings[ids] + position_embeddings[positions])  (one SkipLayerNorm kernel)
             per layer (post-norm, BERT's): GroupQueryAttention(h @ [q; k; v] + bias)  (the cache written in place)
                        h = SkipLayerNorm(attn @ dense, h, bias)       (attention.output.LayerNorm)
                        MultiHeadAttention(h @ query + bias) over the cross buffers (masked image tokens hidden)
                        h = SkipLayerNorm(cross @ dense, h, bias)      (crossattention.output.LayerNorm)
                        h = SkipLayerNorm(act(h @ intermediate + bias) @ output, h, bias)  (output.LayerNorm)
             logits = LayerNorm(act(h @ transform.dense + bias)) @ word_embeddings^T + decoder bias  (tied head)

Positions are the decoder columns (0-based, HF's `past_key_values_length`); scores are scaled by head_dim ** -0.5.
HF's BLIP text cross-attention does not apply its `encoder_attention_mask` (BLIP's images have no padding: the
mask is all ones); the graph honours it anyway. Every weight of the text decoder must be used.
"""
from __future__ import annotations

import numpy as np

from CausalLM import fused_graph as fg
from Seq2Seq import fused_graph as sg

# HF's hidden_act -> (the graph's GELU form: True = tanh (FastGelu), False = exact (BiasGelu); None: Relu)
ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True, "gelu_fast": True, "relu": None}
DECODER = "text_decoder"  # the text decoder's weight prefix; the vision encoder's is "vision_model."


def refusal(config) -> str | None:
    """Why this BLIP model has no built graphs here (None: it has them)."""
    text = config.text_config
    if text.hidden_act not in ACTIVATIONS:
        return (f"onnxrt's built BLIP graphs have no op for activation {text.hidden_act!r} "
                f"(they have {', '.join(ACTIVATIONS)})")
    if not text.is_decoder:
        return "onnxrt's built BLIP graphs need a text decoder (is_decoder: cross-attention to the image)"
    if (text.hidden_size // text.num_attention_heads) % 8 or text.hidden_size % text.num_attention_heads:
        return (f"onnxrt's built BLIP graphs need a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's hidden size {text.hidden_size} over {text.num_attention_heads} heads is not")
    return None


def build(arch, weights: fg.StateDict, make_graph) -> dict:
    """The cross and decoder graphs of a BlipForConditionalGeneration (`arch`: its config and structure)."""
    graphs = {"cross": _cross(_Parts(arch, weights, make_graph("cross"))),
              "decoder": _decoder(_Parts(arch, weights, make_graph("decoder")))}
    sg.check_all_used(weights, arch, skip=("vision_model.",))
    return graphs


class _Parts:
    """One graph's builder, the checkpoint's weights and the text decoder's shapes."""

    def __init__(self, arch, take: fg.StateDict, g: fg.GraphBuilder):
        text = arch.config.text_config
        self.arch, self.take, self.g, self.text = arch, take, g, text
        self.heads, self.dim = text.num_attention_heads, text.hidden_size
        self.head_dim = self.dim // self.heads
        self.eps, self.layers = text.layer_norm_eps, text.num_hidden_layers

    def weight(self, name: str, array=None) -> str:
        return self.g.weight(name, self.take(name) if array is None else array)

    def linear(self, x: str, name: str) -> str:
        """x @ W^T + bias of the nn.Linear `name`."""
        y, bias = fg.product(self.g, self.take, x, name)
        return self.g.op("Add", [y, bias]) if bias else y

    def add_norm(self, x: str, residual: str, name: str) -> str:
        """LayerNorm(x @ W^T + bias + residual) of the BERT output block `name` (its dense and LayerNorm): post-norm,
        the normed sum is the next residual."""
        y, bias = fg.product(self.g, self.take, x, f"{name}.dense")
        normed, _ = fg.skip_layer_norm(self.g, y, residual, self.weight(f"{name}.LayerNorm.weight"),
                                       self.weight(f"{name}.LayerNorm.bias"), bias, self.eps)
        return normed

    def activation(self, x: str, name: str) -> str:
        """act(x @ W^T + bias) of the nn.Linear `name` (the bias inside the GELU kernel)."""
        y, bias = fg.product(self.g, self.take, x, name)
        tanh = ACTIVATIONS[self.text.hidden_act]
        if tanh is None:
            return self.g.op("Relu", [self.g.op("Add", [y, bias]) if bias else y])
        return fg.gelu(self.g, y, bias, tanh) if bias else sg.gelu(self.g, y, tanh)

    def qkv(self, x: str, attn: str) -> str:
        """x @ [q; k; v]^T + [q; k; v] biases [B, S, 3 H D]: the three projections as one product."""
        weight = np.concatenate([self.take(f"{attn}.{p}.weight") for p in ("query", "key", "value")])
        bias = np.concatenate([self.take(f"{attn}.{p}.bias") for p in ("query", "key", "value")])
        y = self.g.op("MatMul", [x, self.g.weight(f"{attn}.qkv.weight", weight.T)])
        return self.g.op("Add", [y, self.g.weight(f"{attn}.qkv.bias", bias)])


def _cross(p: _Parts) -> "fg.onnx.ModelProto":
    g = p.g
    names = sg.cross_io(g, p.layers, p.heads, p.head_dim, p.arch.config.vision_config.hidden_size)
    for i, pair in enumerate(names):
        attn = f"{DECODER}.bert.encoder.layer.{i}.crossattention.self"
        for out, proj in zip(pair, ("key", "value")):
            weight = p.weight(f"{attn}.{proj}.weight", p.take(f"{attn}.{proj}.weight").T)
            bias = p.weight(f"{attn}.{proj}.bias")
            sg.cross_projection(g, "encoder_hidden_states", weight, bias, p.heads, p.head_dim, out)
    return g.model("blip_cross")


def _decoder(p: _Parts) -> "fg.onnx.ModelProto":
    g, scale = p.g, p.head_dim ** -0.5
    pasts, crosses = sg.decoder_io(g, p.layers, p.heads, p.head_dim, p.text.vocab_size)
    cross_bias = sg.padding_bias(g, "encoder_attention_mask", "input_ids")  # [B, 1, S, T]
    embeddings = f"{DECODER}.bert.embeddings"
    tokens, head = fg.embedding_and_head(g, p.take, p.arch.text_decoder, f"{embeddings}.word_embeddings.weight",
                                         f"{DECODER}.cls.predictions.decoder.weight")  # [B, S, E], [E, V]
    positions = g.op("Gather", [p.weight(f"{embeddings}.position_embeddings.weight"), "position_ids"])
    h, _ = fg.skip_layer_norm(g, tokens, positions, p.weight(f"{embeddings}.LayerNorm.weight"),
                              p.weight(f"{embeddings}.LayerNorm.bias"), None, p.eps)
    for i in range(p.layers):
        layer = f"{DECODER}.bert.encoder.layer.{i}"
        present = (f"present.{i}.key", f"present.{i}.value")
        attn = fg.attention(g, p.qkv(h, f"{layer}.attention.self"), pasts[i], present, p.heads, scale)  # [B, S, E]
        h = p.add_norm(attn, h, f"{layer}.attention.output")
        query = p.linear(h, f"{layer}.crossattention.self.query")
        cross = sg.attend(g, query, *crosses[i], p.heads, scale, cross_bias)  # [B, S, E]
        h = p.add_norm(cross, h, f"{layer}.crossattention.output")
        h = p.add_norm(p.activation(h, f"{layer}.intermediate.dense"), h, f"{layer}.output")
    transform = f"{DECODER}.cls.predictions.transform"
    h = fg.layer_norm(g, p.activation(h, f"{transform}.dense"), p.weight(f"{transform}.LayerNorm.weight"),
                      p.weight(f"{transform}.LayerNorm.bias"), p.eps)
    bias = p.weight(f"{DECODER}.cls.predictions.decoder.bias")
    g.op("Add", [g.op("MatMul", [h, head]), bias], ["logits"])  # [B, S, V]
    return g.model("blip_decoder")


BUILDER = sg.Seq2SeqBuilder(model_types=("blip",), version="1", build=build, refusal=refusal,
                            parts=("cross", "decoder"))  # bump the version when a graph changes
