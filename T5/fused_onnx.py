"""T5's encoder-decoder graphs for ONNX Runtime (HF model_type "t5": T5, flan-T5, the offline variants), built from
the HF weights with `Seq2Seq.fused_graph` and `CausalLM.fused_graph`:

    encoder: x = embed_tokens[ids]                                        -> the residual stream
             per layer: MultiHeadAttention(RMSNorm(x) @ [q; k; v], bias)  (bias: the bidirectional relative
                        position bias + the padding columns hidden)
                        SkipSimplifiedLayerNorm(attn @ o, residual)       -> the feed-forward's input
                        ReLU(h @ wi) or GELU(h @ wi_0) * (h @ wi_1), @ wo
                        SkipSimplifiedLayerNorm(ff, residual)             -> the next layer's input (the last:
                                                                             final_layer_norm)
    cross:   every decoder layer's EncDecAttention k and v of the encoder's output, heads first
    decoder: as the encoder, with per layer: GroupQueryAttention writing h @ [q; k; v]'s keys and values into the
             shared buffer (its own output discarded: its CUDA kernel takes no bias), MultiHeadAttention of the
             queries over the whole buffer with the causal relative position bias; cross-attention of h @ q over
             the cross buffers (padded encoder columns hidden); in a graph that owns its attention (`BUILDER`'s
             own_attention) both are this project's Attention op, self-attention reading the position table
             itself; logits = final_layer_norm (x d_model^-0.5 where HF
             rescales a tied head's input) @ lm_head^T

T5 does not scale its attention scores (scale 1). The relative position bias is a table by key-minus-query
distance made at build time with HF's own bucketing (`T5Attention._relative_position_bucket`) over distances up
to relative_attention_max_distance, past which every distance falls in the last bucket: a clipped distance
gives the bias of any distance, so the graphs have no length bound of their own. In the decoder's table the
positive distances (keys after the query) also carry the mask.

fp16: HF keeps `wo` in fp32 (`_keep_in_fp32_modules`), so its residual stream becomes fp32 at the first
feed-forward (and a `wo` output past fp16's range stays finite). Here the residual stream is fp16 held at
RESIDUAL_SCALE, as an fp16 decoder's stream is: every product added to it (the attention outputs, `wo`) is an fp16
product of half weights whose epilogue multiplies by the scale before the fp16 store (FusedMatMul's alpha), so `wo`
reads half the bytes of HF's fp32 copy while its output and the stream keep 2^8 x fp16's range, and the RMS norms
(fp32 arithmetic inside ONNX Runtime's kernels) see the same stream with their epsilon x scale^2. `wo`'s weights
are rounded to fp16, as the frameworks step's half copy. The stream's sums are rounded to fp16 where HF's are fp32:
on an H100 with flan-T5-XL's shapes, fp16 greedy tokens stayed HF's (2 rows, 64 tokens), and the stream and norms
in fp32 (WIDE_STREAM: a cast on each side of every norm, 146 kernels a step) took 2.592 ms a token against 2.376
(docs/PERFORMANCE.md). fp32 graphs have no casts and no scale.
"""
from __future__ import annotations

import numpy as np
import torch
from onnx import TensorProto

from CausalLM import fused_graph as fg
from Seq2Seq import fused_graph as sg

# HF's dense_act_fn -> (the graph's op: None = Relu, True = the tanh GELU (FastGelu), False = the exact GELU)
ACTIVATIONS = {"relu": None, "gelu_new": True, "gelu_fast": True, "gelu_pytorch_tanh": True, "gelu": False}
RESIDUAL_SCALE = 2.0 ** -8  # the fp16 graphs' residual stream, in units of the model's
# fp16 graphs: the residual stream and the norms in fp16 at RESIDUAL_SCALE (False), or in fp32, HF's stream once its
# `wo` is fp32 (True: a benchmark's variant, fingerprinted alike: build it into another working directory)
WIDE_STREAM = False


def residual_scale(dtype) -> float:
    """The residual stream's scale in graphs of `dtype` (1: the model's own units)."""
    return 1.0 if np.dtype(dtype) == np.float32 else RESIDUAL_SCALE


def refusal(config) -> str | None:
    """Why this T5 model has no built graphs here (None: it has them)."""
    if config.dense_act_fn not in ACTIVATIONS:
        return (f"onnxrt's built T5 graphs have no op for activation {config.dense_act_fn!r} "
                f"(they have {', '.join(ACTIVATIONS)})")
    if config.d_kv % 8:
        return (f"onnxrt's built T5 graphs need a head size that is a multiple of 8 (GroupQueryAttention); this "
                f"model's is {config.d_kv}")
    return None


def build(arch, weights: fg.StateDict, make_graph) -> dict:
    """The encoder, cross and decoder graphs of a T5ForConditionalGeneration (`arch`: its config and structure)."""
    graphs = {"encoder": _encoder(_Parts(arch, weights, make_graph("encoder"))),
              "cross": _cross(_Parts(arch, weights, make_graph("cross"))),
              "decoder": _decoder(_Parts(arch, weights, make_graph("decoder")))}
    sg.check_all_used(weights, arch)
    return graphs


class _Parts:
    """One graph's builder, the checkpoint's weights and T5's shapes; the residual stream's norms."""

    def __init__(self, arch, take: fg.StateDict, g: fg.GraphBuilder):
        config = arch.config
        self.arch, self.take, self.g, self.config = arch, take, g, config
        self.heads, self.head_dim, self.dim = config.num_heads, config.d_kv, config.d_model
        self.wide = g.dtype != np.float32 and WIDE_STREAM  # the residual stream and norms in fp32 (WIDE_STREAM)
        self.scale = residual_scale(g.dtype)
        self.eps = config.layer_norm_epsilon * self.scale ** 2  # RMSNorm(s x) with eps s^2 = RMSNorm(x) with eps

    def weight(self, name: str, array=None, dtype=None) -> str:
        return self.g.weight(name, self.take(name) if array is None else array, dtype)

    def stream(self, x: str) -> str:
        """The residual stream from the embeddings, at the stream's scale (fp32 in a WIDE_STREAM fp16 graph)."""
        x = self.g.op("Cast", [x], to=TensorProto.FLOAT) if self.wide else x
        if self.scale == 1:
            return x
        return self.g.op("Mul", [x, sg.constant(self.g, self.scale, np.float32 if self.wide else self.g.dtype)])

    def norm(self, x: str, name: str, gamma=None) -> str:
        """RMSNorm(x) * the norm's weight, in the graph's float type (x: the residual stream)."""
        gamma = self.weight(f"{name}.weight", gamma, np.float32 if self.wide else None)
        return self.narrow(fg.rms_norm(self.g, x, gamma, self.eps))

    def add_norm(self, x: str, residual: str, name: str, gamma=None) -> tuple[str, str]:
        """(RMSNorm(x + residual) * the norm's weight in the graph's float type, x + residual); x: a product
        `into_stream` (at the stream's scale)."""
        if self.wide:
            x = self.g.op("Cast", [x], to=TensorProto.FLOAT)
        gamma = self.weight(f"{name}.weight", gamma, np.float32 if self.wide else None)
        normed, total = fg.skip_rms_norm(self.g, x, residual, gamma, None, self.eps)
        return self.narrow(normed), total

    def narrow(self, x: str) -> str:
        return self.g.op("Cast", [x], to=self.g.elem) if self.wide else x

    def qkv(self, x: str, attn: str) -> str:
        """x @ [q; k; v]^T [B, S, 3 H D] (T5's projections have no bias)."""
        weight = np.concatenate([self.take(f"{attn}.{p}.weight") for p in "qkv"])
        return self.g.matmul(x, f"{attn}.qkv.weight", weight)

    def linear(self, x: str, name: str) -> str:
        return self.g.matmul(x, f"{name}.weight", self.take(f"{name}.weight"))

    def into_stream(self, x: str, name: str) -> str:
        """x @ the nn.Linear `name`'s weight^T at the residual stream's scale, in the graph's float type."""
        return self.g.matmul(x, f"{name}.weight", self.take(f"{name}.weight"), alpha=self.scale)

    def feed_forward(self, x: str, ff: str) -> str:
        """T5's feed-forward of x [B, S, E] -> [B, S, E] at the residual stream's scale."""
        g, tanh = self.g, ACTIVATIONS[self.config.dense_act_fn]
        if f"{ff}.wi.weight" in self.take:
            inner = self.linear(x, f"{ff}.wi")
            inner = g.op("Relu", [inner]) if tanh is None else sg.gelu(g, inner, tanh)
        else:  # gated: act(x @ wi_0^T) * (x @ wi_1^T)
            activation = "relu" if tanh is None else "gelu_tanh" if tanh else "gelu"
            inner = fg.gated(g, x, f"{ff}.wi.weight", self.take(f"{ff}.wi_0.weight"), self.take(f"{ff}.wi_1.weight"),
                             activation)
        return self.into_stream(inner, f"{ff}.wo")

    def position_table(self, stack: str, causal: bool) -> tuple[str, int]:
        """(the stack's relative position bias by clipped distance [2 R + 1, H] as an initializer, R)."""
        attention = type(self.arch.encoder.block[0].layer[0].SelfAttention)
        config = self.config
        reach = config.relative_attention_max_distance

        def buckets(distances):
            return attention._relative_position_bucket(
                torch.as_tensor(distances), bidirectional=not causal, num_buckets=config.relative_attention_num_buckets,
                max_distance=reach).numpy()

        name = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        table = sg.relative_table(self.take(name), buckets, reach, causal, self.g.dtype)
        return self.g.weight(name, table), reach


def _encoder(p: _Parts) -> "fg.onnx.ModelProto":
    g, layers = p.g, p.config.num_layers
    sg.encoder_io(g, p.dim)
    table, reach = p.position_table("encoder", causal=False)
    positions = sg.arange(g, "input_ids", 1)  # [T]
    relative = sg.relative_bias(g, table, reach, g.op("Unsqueeze", [positions, sg.constant(g, [0])]), positions)
    bias = g.op("Add", [relative, sg.padding_bias(g, "attention_mask", "input_ids")])  # [B, H, T, T]
    residual = p.stream(g.op("Gather", [p.weight("encoder.embed_tokens.weight"), "input_ids"]))  # [B, T, E]
    h = p.norm(residual, "encoder.block.0.layer.0.layer_norm")
    size = p.heads * p.head_dim
    for i in range(layers):
        block = f"encoder.block.{i}"
        q, k, v = g.op("Split", [p.qkv(h, f"{block}.layer.0.SelfAttention"), sg.constant(g, [size] * 3)], 3, axis=-1)
        attn = sg.attend(g, q, k, v, p.heads, 1.0, bias)  # [B, T, H D]
        out = p.into_stream(attn, f"{block}.layer.0.SelfAttention.o")
        h, residual = p.add_norm(out, residual, f"{block}.layer.1.layer_norm")
        after = f"encoder.block.{i + 1}.layer.0.layer_norm" if i + 1 < layers else "encoder.final_layer_norm"
        h, residual = p.add_norm(p.feed_forward(h, f"{block}.layer.1.DenseReluDense"), residual, after)
    g.op("Identity", [h], ["encoder_hidden_states"])
    return g.model("t5_encoder")


def _cross(p: _Parts) -> "fg.onnx.ModelProto":
    g = p.g
    names = sg.cross_io(g, p.config.num_decoder_layers, p.heads, p.head_dim, p.dim)
    for i, (key, value) in enumerate(names):
        attn = f"decoder.block.{i}.layer.1.EncDecAttention"
        for out, proj in ((key, "k"), (value, "v")):
            weight = p.weight(f"{attn}.{proj}.weight", p.take(f"{attn}.{proj}.weight").T)
            sg.cross_projection(g, "encoder_hidden_states", weight, None, p.heads, p.head_dim, out)
    return g.model("t5_cross")


def _decoder(p: _Parts) -> "fg.onnx.ModelProto":
    g, config, layers = p.g, p.config, p.config.num_decoder_layers
    pasts, crosses = sg.decoder_io(g, layers, p.heads, p.head_dim, config.vocab_size)
    table, reach = p.position_table("decoder", causal=True)
    own = fg.own_attention(g, pasts[0])  # this project's Attention op reads the table itself
    self_bias = None if own else sg.relative_bias(g, table, reach, "position_ids", sg.arange(g, pasts[0][0], 2))
    cross_bias = sg.cross_bias(g, crosses)
    tokens, head = fg.embedding_and_head(g, p.take, p.arch, "decoder.embed_tokens.weight", "lm_head.weight")
    residual = p.stream(tokens)
    h = p.norm(residual, "decoder.block.0.layer.0.layer_norm")
    size = p.heads * p.head_dim
    for i in range(layers):
        block, present = f"decoder.block.{i}", (f"present.{i}.key", f"present.{i}.value")
        qkv = p.qkv(h, f"{block}.layer.0.SelfAttention")  # [B, S, 3 H D]
        if own:
            attn = fg.attention(g, qkv, pasts[i], present, p.heads, 1.0, bias=table)  # [B, S, H D]
        else:
            fg.attention(g, qkv, pasts[i], present, p.heads, 1.0)  # writes the buffer; its output is not used
            q = g.op("Slice", [qkv, sg.constant(g, [0]), sg.constant(g, [size]), sg.constant(g, [-1])])
            attn = sg.attend(g, q, *present, p.heads, 1.0, self_bias)  # [B, S, H D]
        h, residual = p.add_norm(p.into_stream(attn, f"{block}.layer.0.SelfAttention.o"), residual,
                                 f"{block}.layer.1.layer_norm")
        cross = sg.cross_attend(g, p.linear(h, f"{block}.layer.1.EncDecAttention.q"), crosses[i], p.heads, 1.0,
                                cross_bias)
        h, residual = p.add_norm(p.into_stream(cross, f"{block}.layer.1.EncDecAttention.o"), residual,
                                 f"{block}.layer.2.layer_norm")
        ff = p.feed_forward(h, f"{block}.layer.2.DenseReluDense")
        if i + 1 < layers:
            h, residual = p.add_norm(ff, residual, f"decoder.block.{i + 1}.layer.0.layer_norm")
    gamma = p.take("decoder.final_layer_norm.weight")
    if getattr(config, "scale_decoder_outputs", config.tie_word_embeddings):  # HF rescales a tied head's input
        gamma = gamma * config.d_model ** -0.5
    h, _ = p.add_norm(ff, residual, "decoder.final_layer_norm", gamma=gamma)
    g.apply(h, head, outputs=["logits"])  # [B, S, V]
    return g.model("t5_decoder")


# bump the version when a graph changes; norms inside the decoder's Linear ops: flan-T5-XL's step 1.956 against
# 2.013 ms a token on an H100; self- and cross-attention as this project's Attention op: 1.701 against 1.957 ms
# (t5-base 0.442 against 0.532, t5-small 0.232 against 0.278; docs/PERFORMANCE.md)
BUILDER = sg.Seq2SeqBuilder(model_types=("t5",), version="3", build=build, refusal=refusal,
                            norms_in_products=True, own_attention=True)
