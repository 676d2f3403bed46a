"""BART's and mBART's encoder-decoder graphs for ONNX Runtime (HF model types "bart", "mbart"), built from the HF
weights with `Seq2Seq.fused_graph` and `CausalLM.fused_graph`:

    embeddings: LayerNorm(embed_tokens[ids] x embed_scale + embed_positions[positions + 2]) (layernorm_embedding)
    encoder:    per layer MultiHeadAttention(h @ [q; k; v] + b, the padding columns hidden) @ out_proj,
                GELU(h @ fc1 + b) @ fc2, each added to the residual stream around its LayerNorm
    cross:      every decoder layer's encoder_attn k_proj and v_proj of the encoder's output, heads first
    decoder:    per layer GroupQueryAttention(h @ [q; k; v] + b) (the cache written in place, causal),
                MultiHeadAttention(h @ q_proj + b) over the cross buffers (padded encoder columns hidden),
                GELU(h @ fc1 + b) @ fc2, each residual add and the LayerNorm after (BART) or before (mBART) it one
                SkipLayerNormalization;
                logits = h @ lm_head^T + final_logits_bias (mBART: h after the decoder's final layer_norm)

Attention scores are scaled by head_dim^-0.5 (HF's scaling of the queries). BART's layers are post-norm
(residual add, then the sub-layer's norm); mBART's pre-norm (the norm feeds the sub-layer; each stack ends with its
own layer_norm). fp16: HF clamps the encoder's layer outputs near the fp16 maximum (BART where some are not finite,
mBART always); the fp16 encoder graph clamps them always (the same values below the bound, as the plain export).
Every weight of the checkpoint must be used (else the build fails naming the ones left over).
"""
from __future__ import annotations

import numpy as np

from CausalLM import fused_graph as fg
from Seq2Seq import fused_graph as sg

# HF's activation_function -> the graph's op: True = the tanh GELU (FastGelu), False = the exact GELU, None = Relu
ACTIVATIONS = {"gelu": False, "gelu_new": True, "gelu_fast": True, "gelu_pytorch_tanh": True, "relu": None}
PRE_NORM = ("mbart",)  # model types whose layers normalise before each sub-layer
OFFSET = 2  # BART's learned positions start at row 2 of the table


def refusal(config) -> str | None:
    """Why this BART or mBART model has no built graphs here (None: it has them)."""
    if config.activation_function not in ACTIVATIONS:
        return (f"onnxrt's built BART graphs have no op for activation {config.activation_function!r} "
                f"(they have {', '.join(ACTIVATIONS)})")
    for stack, heads in (("encoder", config.encoder_attention_heads), ("decoder", config.decoder_attention_heads)):
        if config.d_model % heads or (config.d_model // heads) % 8:
            return (f"onnxrt's built BART graphs need a head size that is a multiple of 8 (GroupQueryAttention); "
                    f"this model's {stack} has {config.d_model} / {heads} heads")
    return None


def build(arch, weights: fg.StateDict, make_graph) -> dict:
    """The encoder, cross and decoder graphs of a Bart- or MBartForConditionalGeneration (`arch`: its structure)."""
    graphs = {"encoder": _encoder(_Parts(arch, weights, make_graph("encoder"), "encoder")),
              "cross": _cross(_Parts(arch, weights, make_graph("cross"), "decoder")),
              "decoder": _decoder(_Parts(arch, weights, make_graph("decoder"), "decoder"))}
    # HF's forward reads each stack's embed_tokens: `shared` is only their common weight where they are tied (an
    # untied model, transformers 5, keeps it as a weight of its own that no output depends on)
    sg.check_all_used(weights, arch, skip=("model.shared.",))
    return graphs


class _Parts:
    """One graph's builder, the checkpoint's weights and one stack's shapes (`stack`: "encoder" or "decoder")."""

    def __init__(self, arch, take: fg.StateDict, g: fg.GraphBuilder, stack: str):
        config = arch.config
        self.arch, self.take, self.g, self.config, self.stack = arch, take, g, config, stack
        self.heads = config.encoder_attention_heads if stack == "encoder" else config.decoder_attention_heads
        self.layers = config.encoder_layers if stack == "encoder" else config.decoder_layers
        self.dim = config.d_model
        self.head_dim = self.dim // self.heads
        self.scale = self.head_dim ** -0.5
        self.pre_norm = config.model_type in PRE_NORM
        self.eps = 1e-5  # nn.LayerNorm's default: BART's norms are made without an epsilon

    def prefix(self, name: str) -> str:
        return f"model.{self.stack}.{name}"

    def norm(self, name: str) -> tuple[str, str]:
        """A LayerNorm's gamma and beta as initializers (`name` under the stack)."""
        name = self.prefix(name)
        return (self.g.weight(f"{name}.weight", self.take(f"{name}.weight")),
                self.g.weight(f"{name}.bias", self.take(f"{name}.bias")))

    def product(self, x: str, name: str) -> tuple[str, str | None]:
        """(x @ W^T, its bias initializer) of the stack's nn.Linear `name`."""
        return fg.product(self.g, self.take, x, self.prefix(name))

    def linear(self, x: str, name: str) -> str:
        y, bias = self.product(x, name)
        return self.g.op("Add", [y, bias]) if bias else y

    def qkv(self, x: str, attn: str) -> str:
        """x @ [q; k; v]^T + [bq; bk; bv] [B, S, 3 H D]."""
        names = [self.prefix(f"{attn}.{p}_proj") for p in "qkv"]
        weight = np.concatenate([self.take(f"{n}.weight") for n in names])
        bias = np.concatenate([self.take(f"{n}.bias") for n in names])
        fused = self.prefix(f"{attn}.qkv_proj")
        return self.g.matmul(x, f"{fused}.weight", weight, self.g.weight(f"{fused}.bias", bias))

    def feed_forward(self, x: str, layer: str) -> tuple[str, str | None]:
        """(act(x @ fc1 + b) @ fc2, fc2's bias) of layer `layer`."""
        g, tanh = self.g, ACTIVATIONS[self.config.activation_function]
        inner, bias = self.product(x, f"{layer}.fc1")
        inner = g.op("Relu", [g.op("Add", [inner, bias])]) if tanh is None else fg.gelu(g, inner, bias, tanh)
        return self.product(inner, f"{layer}.fc2")

    def embeddings(self, ids: str, positions: str, head: bool = False):
        """(the residual stream after layernorm_embedding [B, S, E], the LM head or None) for token ids and
        positions (int64, [B, S] or [S])."""
        g, take = self.g, self.take
        table = take(self.prefix("embed_positions.weight"))[OFFSET:]
        placed = g.op("Gather", [g.weight(self.prefix("embed_positions.weight"), table), positions])
        if head:
            tokens, lm = fg.embedding_and_head(g, take, self.arch, self.prefix("embed_tokens.weight"), "lm_head.weight")
        else:
            tokens, lm = g.op("Gather", [g.weight(self.prefix("embed_tokens.weight"),
                                                  take(self.prefix("embed_tokens.weight"))), ids]), None
        if self.config.scale_embedding:
            tokens = g.op("Mul", [tokens, sg.constant(g, self.dim ** 0.5, g.dtype)])
        return fg.layer_norm(g, g.op("Add", [tokens, placed]), *self.norm("layernorm_embedding"), self.eps), lm

    def clamp(self, x: str) -> str:
        """HF's fp16 clamp of an encoder layer's output (none in fp32)."""
        if self.g.dtype == np.float32:
            return x
        bound = float(np.finfo(np.float16).max) - 1000  # Max and Min: ONNX Runtime's CUDA Clip has no fp16 kernel
        low = self.g.op("Max", [x, sg.constant(self.g, -bound, np.float16)])
        return self.g.op("Min", [low, sg.constant(self.g, bound, np.float16)])


def _encoder(p: _Parts) -> "fg.onnx.ModelProto":
    g = p.g
    sg.encoder_io(g, p.dim)
    h, _ = p.embeddings("input_ids", sg.arange(g, "input_ids", 1))  # [B, T, E]
    bias = sg.padding_bias(g, "attention_mask", "input_ids")  # [B, 1, T, T]
    size = p.heads * p.head_dim
    for i in range(p.layers):
        layer = f"layers.{i}"
        x = fg.layer_norm(g, h, *p.norm(f"{layer}.self_attn_layer_norm"), p.eps) if p.pre_norm else h
        q, k, v = g.op("Split", [p.qkv(x, f"{layer}.self_attn"), sg.constant(g, [size] * 3)], 3, axis=-1)
        out, out_bias = p.product(sg.attend(g, q, k, v, p.heads, p.scale, bias), f"{layer}.self_attn.out_proj")
        if p.pre_norm:
            x, h = fg.skip_layer_norm(g, out, h, *p.norm(f"{layer}.final_layer_norm"), out_bias, p.eps)
            ff, ff_bias = p.feed_forward(x, layer)
            h = p.clamp(g.op("Add", [g.op("Add", [ff, ff_bias]), h]))
        else:
            h, _ = fg.skip_layer_norm(g, out, h, *p.norm(f"{layer}.self_attn_layer_norm"), out_bias, p.eps)
            ff, ff_bias = p.feed_forward(h, layer)
            h = p.clamp(fg.skip_layer_norm(g, ff, h, *p.norm(f"{layer}.final_layer_norm"), ff_bias, p.eps)[0])
    if p.pre_norm:
        h = fg.layer_norm(g, h, *p.norm("layer_norm"), p.eps)
    g.op("Identity", [h], ["encoder_hidden_states"])
    return g.model(f"{p.config.model_type}_encoder")


def _cross(p: _Parts) -> "fg.onnx.ModelProto":
    g = p.g
    names = sg.cross_io(g, p.layers, p.heads, p.head_dim, p.dim)
    for i, (key, value) in enumerate(names):
        for out, proj in ((key, "k_proj"), (value, "v_proj")):
            name = p.prefix(f"layers.{i}.encoder_attn.{proj}")
            weight = g.weight(f"{name}.weight", p.take(f"{name}.weight").T)
            bias = g.weight(f"{name}.bias", p.take(f"{name}.bias"))
            sg.cross_projection(g, "encoder_hidden_states", weight, bias, p.heads, p.head_dim, out)
    return g.model(f"{p.config.model_type}_cross")


def _decoder(p: _Parts) -> "fg.onnx.ModelProto":
    g, layers = p.g, p.layers
    pasts, crosses = sg.decoder_io(g, layers, p.heads, p.head_dim, p.config.vocab_size)
    cross_bias = sg.cross_bias(g, crosses)
    residual, head = p.embeddings("input_ids", "position_ids", head=True)  # [B, S, E]
    # the input of each sub-layer: post-norm, the residual stream itself; pre-norm, its norm
    h = fg.layer_norm(g, residual, *p.norm("layers.0.self_attn_layer_norm"), p.eps) if p.pre_norm else residual
    for i in range(layers):
        layer = f"layers.{i}"
        present = (f"present.{i}.key", f"present.{i}.value")
        attn = fg.attention(g, p.qkv(h, f"{layer}.self_attn"), pasts[i], present, p.heads, p.scale)  # [B, S, H D]
        out, bias = p.product(attn, f"{layer}.self_attn.out_proj")
        h, residual = _add_norm(p, out, residual, bias, f"{layer}.self_attn_layer_norm",
                                f"{layer}.encoder_attn_layer_norm")
        cross = sg.cross_attend(g, p.linear(h, f"{layer}.encoder_attn.q_proj"), crosses[i], p.heads, p.scale,
                                cross_bias)
        out, bias = p.product(cross, f"{layer}.encoder_attn.out_proj")
        h, residual = _add_norm(p, out, residual, bias, f"{layer}.encoder_attn_layer_norm", f"{layer}.final_layer_norm")
        ff, bias = p.feed_forward(h, layer)
        after = f"layers.{i + 1}.self_attn_layer_norm" if i + 1 < layers else "layer_norm"
        h, residual = _add_norm(p, ff, residual, bias, f"{layer}.final_layer_norm", after)
    final_bias = p.take.optional("final_logits_bias")  # [1, V]; HF loads a checkpoint without it as zeros
    bias = None if final_bias is None else g.weight("final_logits_bias", final_bias[0])
    g.apply(h, head, bias, outputs=["logits"])  # [B, S, V]
    return g.model(f"{p.config.model_type}_decoder")


def _add_norm(p: _Parts, x: str, residual: str, bias: str | None, post: str, pre: str) -> tuple[str, str]:
    """(the next sub-layer's input, the residual stream) after adding x + bias to the residual: post-norm, the sum
    normed by `post` is both; pre-norm, the sum is the stream and its norm by `pre` the input."""
    if p.pre_norm:
        return fg.skip_layer_norm(p.g, x, residual, *p.norm(pre), bias, p.eps)
    h, _ = fg.skip_layer_norm(p.g, x, residual, *p.norm(post), bias, p.eps)
    return h, h


# this project's Attention op for the decoder's self- and cross-attention: BART-large's step 0.591 against 0.597 ms
# a token on an H100 (docs/PERFORMANCE.md)
BUILDER = sg.Seq2SeqBuilder(model_types=("bart", "mbart"), version="1", build=build, refusal=refusal,
                            own_attention=True)
