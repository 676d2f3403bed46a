"""BLIP's captioning graphs for ONNX Runtime (HF model_type "blip": BlipForConditionalGeneration, its image encoder
HF's `BlipVisionModel` and its text decoder HF's `BlipTextLMHeadModel`), built from the HF weights with
`Seq2Seq.fused_graph` and `CausalLM.fused_graph`: all three parts, "encoder", "cross" and "decoder".

    encoder: x = Conv(pixel_values, patch_embedding) flattened to [B, N, E] (kernel = stride = patch_size), the
             class token first, + position_embedding (the config's own image size: HF interpolates no positions)
             per layer (pre-norm, ViT's): MultiHeadAttention(LayerNorm(x) @ qkv + bias)  (no mask: every patch)
                        h, x = SkipLayerNorm(attn @ projection, x, bias)   (layer_norm2; x: the residual sum)
                        h, x = SkipLayerNorm(act(h @ fc1 + bias) @ fc2, x, bias)  (the next layer's layer_norm1,
                                                                                  the last: post_layernorm)
             encoder_hidden_states = post_layernorm(x)  (HF's last_hidden_state)
    cross:   every layer's crossattention key and value of the image embeddings (their projections take the vision
             width, `encoder_hidden_size`), heads first
    decoder: h = LayerNorm(word_embeddings[ids] + position_embeddings[positions])  (one SkipLayerNorm kernel)
             per layer (post-norm, BERT's): GroupQueryAttention(h @ [q; k; v] + bias)  (the cache written in place)
                        h = SkipLayerNorm(attn @ dense, h, bias)       (attention.output.LayerNorm)
                        MultiHeadAttention(h @ query + bias) over the cross buffers (masked image tokens hidden)
                        h = SkipLayerNorm(cross @ dense, h, bias)      (crossattention.output.LayerNorm)
                        h = SkipLayerNorm(act(h @ intermediate + bias) @ output, h, bias)  (output.LayerNorm)
             in a graph that owns its attention (`BUILDER`'s own_attention) both attentions are this project's
             Attention op (the cross one over the cross buffers, causal=0)
             logits = LayerNorm(act(h @ transform.dense + bias)) @ word_embeddings^T + decoder bias  (tied head)

The encoder takes pixel_values [B, 3, image_size, image_size] in the graph's float type (as the torch.onnx export
of the vision model did: fp16 in fp16 graphs) and, like HF's fp16 model, keeps its residual stream in that type.
Attention scores are scaled by head_dim ** -0.5 in both towers. Decoder positions are the decoder columns (0-based,
HF's `past_key_values_length`). HF's BLIP text cross-attention does not apply its `encoder_attention_mask` (BLIP's
images have no padding: the mask is all ones); the graph honours it anyway. Every weight of the checkpoint must be
used.
"""
from __future__ import annotations

import numpy as np

from CausalLM import fused_graph as fg
from Seq2Seq import fused_graph as sg

# HF's hidden_act -> (the graph's GELU form: True = tanh (FastGelu), False = exact (BiasGelu); None: Relu)
ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True, "gelu_fast": True, "relu": None}
DECODER = "text_decoder"  # the text decoder's weight prefix
VISION = "vision_model"  # the image encoder's


def refusal(config) -> str | None:
    """Why this BLIP model has no built graphs here (None: it has them)."""
    text = config.text_config
    for act in (text.hidden_act, config.vision_config.hidden_act):
        if act not in ACTIVATIONS:
            return f"onnxrt's built BLIP graphs have no op for activation {act!r} (they have {', '.join(ACTIVATIONS)})"
    if not text.is_decoder:
        return "onnxrt's built BLIP graphs need a text decoder (is_decoder: cross-attention to the image)"
    if (text.hidden_size // text.num_attention_heads) % 8 or text.hidden_size % text.num_attention_heads:
        return (f"onnxrt's built BLIP graphs need a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's hidden size {text.hidden_size} over {text.num_attention_heads} heads is not")
    return None


def build(arch, weights: fg.StateDict, make_graph) -> dict:
    """The encoder, cross and decoder graphs of a BlipForConditionalGeneration (`arch`: its config and structure)."""
    vision = arch.config.vision_config
    graphs = {"encoder": _encoder(_Parts(arch, weights, make_graph("encoder"), vision)),
              "cross": _cross(_Parts(arch, weights, make_graph("cross"))),
              "decoder": _decoder(_Parts(arch, weights, make_graph("decoder")))}
    sg.check_all_used(weights, arch)
    return graphs


class _Parts:
    """One graph's builder, the checkpoint's weights and the shapes of the tower it builds (`config`: the text
    decoder's unless given, the vision encoder's for the encoder graph)."""

    def __init__(self, arch, take: fg.StateDict, g: fg.GraphBuilder, config=None):
        config = config or arch.config.text_config
        self.arch, self.take, self.g, self.config = arch, take, g, config
        self.heads, self.dim = config.num_attention_heads, config.hidden_size
        self.head_dim = self.dim // self.heads
        self.eps, self.layers = config.layer_norm_eps, config.num_hidden_layers

    def weight(self, name: str, array=None) -> str:
        return self.g.weight(name, self.take(name) if array is None else array)

    def linear(self, x: str, name: str) -> str:
        """x @ W^T + bias of the nn.Linear `name`."""
        y, bias = fg.product(self.g, self.take, x, name)
        return self.g.op("Add", [y, bias]) if bias else y

    def add_norm(self, x: str, residual: str, name: str) -> str:
        """LayerNorm(x @ W^T + bias + residual) of the BERT output block `name` (its dense and LayerNorm): post-norm,
        the normed sum is the next residual."""
        return self.skip_norm(x, residual, f"{name}.dense", f"{name}.LayerNorm")[0]

    def skip_norm(self, x: str, residual: str, linear: str, norm: str) -> tuple[str, str]:
        """(LayerNorm `norm` of the sum, the sum x @ W^T + bias + residual) of the nn.Linear `linear`, in one
        SkipLayerNorm kernel (the product's bias inside it)."""
        y, bias = fg.product(self.g, self.take, x, linear)
        return fg.skip_layer_norm(self.g, y, residual, self.weight(f"{norm}.weight"), self.weight(f"{norm}.bias"),
                                  bias, self.eps)

    def norm(self, x: str, name: str) -> str:
        """The nn.LayerNorm `name` of x."""
        return fg.layer_norm(self.g, x, self.weight(f"{name}.weight"), self.weight(f"{name}.bias"), self.eps)

    def activation(self, x: str, name: str) -> str:
        """act(x @ W^T + bias) of the nn.Linear `name` (the bias inside the GELU kernel)."""
        y, bias = fg.product(self.g, self.take, x, name)
        tanh = ACTIVATIONS[self.config.hidden_act]
        if tanh is None:
            return self.g.op("Relu", [self.g.op("Add", [y, bias]) if bias else y])
        return fg.gelu(self.g, y, bias, tanh) if bias else sg.gelu(self.g, y, tanh)

    def qkv(self, x: str, attn: str) -> str:
        """x @ [q; k; v]^T + [q; k; v] biases [B, S, 3 H D]: the three projections as one product."""
        weight = np.concatenate([self.take(f"{attn}.{p}.weight") for p in ("query", "key", "value")])
        bias = np.concatenate([self.take(f"{attn}.{p}.bias") for p in ("query", "key", "value")])
        return self.g.matmul(x, f"{attn}.qkv.weight", weight, self.g.weight(f"{attn}.qkv.bias", bias))


def _encoder(p: _Parts) -> "fg.onnx.ModelProto":
    g = p.g
    size = p.config.image_size
    g.input("pixel_values", g.elem, ["batch", 3, size, size])
    g.output("encoder_hidden_states", g.elem, ["batch", "encoder_seq", p.dim])
    x = _embeddings(p)  # [B, T, E]: the residual stream
    h = p.norm(x, _norm_before(p, 0))
    for i in range(p.layers):
        layer = f"{VISION}.encoder.layers.{i}"
        qkv = g.op("Split", [p.linear(h, f"{layer}.self_attn.qkv"), sg.constant(g, [p.dim] * 3)], 3, axis=-1)
        attn = sg.attend(g, *qkv, p.heads, p.head_dim ** -0.5, None)  # [B, T, E]
        h, x = p.skip_norm(attn, x, f"{layer}.self_attn.projection", f"{layer}.layer_norm2")
        h, x = p.skip_norm(p.activation(h, f"{layer}.mlp.fc1"), x, f"{layer}.mlp.fc2", _norm_before(p, i + 1))
    g.op("Identity", [h], ["encoder_hidden_states"])  # post_layernorm(x): HF's last_hidden_state
    return g.model("blip_vision_encoder")


def _embeddings(p: _Parts) -> str:
    """BlipVisionEmbeddings at the config's image size [B, 1 + N, E]: the patches (a Conv whose kernel and stride are
    the patch size, [B, E, H/P, W/P] flattened to [B, N, E]) after the class token, plus the position embeddings."""
    g, name, patch = p.g, f"{VISION}.embeddings", p.config.patch_size
    conv = g.op("Conv", ["pixel_values", p.weight(f"{name}.patch_embedding.weight"),
                         p.weight(f"{name}.patch_embedding.bias")], kernel_shape=[patch, patch], strides=[patch, patch])
    patches = g.op("Transpose", [g.op("Reshape", [conv, sg.constant(g, [0, p.dim, -1])])], perm=[0, 2, 1])
    rows = g.op("Gather", [g.op("Shape", ["pixel_values"]), sg.constant(g, [0])])  # [1]: B
    shape = g.op("Concat", [rows, sg.constant(g, [1, p.dim])], axis=0)
    cls = g.op("Expand", [p.weight(f"{name}.class_embedding"), shape])  # [B, 1, E]
    tokens = g.op("Concat", [cls, patches], axis=1)
    return g.op("Add", [tokens, p.weight(f"{name}.position_embedding")])  # + [1, 1 + N, E]


def _norm_before(p: _Parts, i: int) -> str:
    """The LayerNorm that reads the residual stream before encoder layer i: its layer_norm1, or after the last layer
    post_layernorm."""
    return f"{VISION}.encoder.layers.{i}.layer_norm1" if i < p.layers else f"{VISION}.post_layernorm"


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
    pasts, crosses = sg.decoder_io(g, p.layers, p.heads, p.head_dim, p.config.vocab_size)
    cross_bias = sg.cross_bias(g, crosses)
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
        cross = sg.cross_attend(g, query, crosses[i], p.heads, scale, cross_bias)  # [B, S, E]
        h = p.add_norm(cross, h, f"{layer}.crossattention.output")
        h = p.add_norm(p.activation(h, f"{layer}.intermediate.dense"), h, f"{layer}.output")
    transform = f"{DECODER}.cls.predictions.transform"
    h = fg.layer_norm(g, p.activation(h, f"{transform}.dense"), p.weight(f"{transform}.LayerNorm.weight"),
                      p.weight(f"{transform}.LayerNorm.bias"), p.eps)
    bias = p.weight(f"{DECODER}.cls.predictions.decoder.bias")
    g.apply(h, head, bias, outputs=["logits"])  # [B, S, V]
    return g.model("blip_decoder")


# all three parts (the default); bump the version when a graph changes
# this project's Attention op for the text decoder's self- and cross-attention: BLIP-large's step 0.568 against 0.570
# ms a token on an H100, 0.800 against 0.809 at batch 8 (docs/PERFORMANCE.md)
BUILDER = sg.Seq2SeqBuilder(model_types=("blip",), version="4", build=build, refusal=refusal, own_attention=True)
