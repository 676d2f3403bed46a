"""`onnxrt --fused-decode` for GPT-J and GPT-NeoX (GPT2/fused_onnx_gptj.py, GPT2/fused_onnx_neox.py): rotary
pairs permuted at build time into GroupQueryAttention's half-split form and widened with identity pairs to the
CUDA kernel's width (`fused_graph.rotary_layout`), parallel residuals, GPT-NeoX's head-by-head query_key_value.

On the CPU (fp32): generation gives HF `generate`'s tokens, token for token, for gptj-offline and gpt-neox-offline
and three tiny random models with what the variants lack (every weight random, norms and biases too): a GPT-J
with GPT-J-6B's proportion of rotary columns in a wider head (12 interleaved pairs in 64), a tied head and the
exact GELU; a GPT-NeoX with GPT-NeoX-20B's head (96 columns, 12 rotated pairs: widened to 16) and its parallel
residual; a sequential GPT-NeoX without attention biases, with the tanh GELU and a tied head. Greedy, 3 beams,
EOS mid-way, a left-padded batch. The widening is checked against HF's rotation directly; checkpoints with the
constants old checkpoints store build, one with a weight the graph leaves out is refused, as are models the op
cannot run (by message). The CLI generates through gpt-neox-offline's graph.

With HARNESS_TEST_DEVICE=cuda (fp16: GroupQueryAttention's CUDA kernel has no fp32) the same models' graphs, their
products on this project's Linear op (the default on CUDA), pass their build check against PyTorch, and the CUDA-graph step gives the tokens of the same graph run uncaptured (greedy and 3 beams, a left-padded
batch); the first differences from HF's fp16 model are reported (fp16 kernels differ: not asserted).
"""

import os

import numpy as np
import pytest
import torch

from NNDF import registry
from NNDF.actions.common import backend_steps
from CausalLM import fused_graph as fg
from CausalLM.ort_fused import FusedDecodeOnnx
from NNDF.context import make_context
from NNDF.errors import ArtifactError
from NNDF.options import ModelOptions

from conftest import random_model, run_cli
from test_fused_decode_ort import _hf as hf_tokens, _tokens as fused_tokens

NEW, ROWS, PROMPT = 8, 3, 6
DEVICE = os.environ.get("HARNESS_TEST_DEVICE", "cpu")
TINY = ["gptj-wide", "neox-20b-head", "neox-sequential"]


def _tiny_configs(tok) -> dict:
    from transformers import GPTJConfig, GPTNeoXConfig

    from NNDF.offline import decoder_token_ids

    ids = decoder_token_ids(tok)
    return {
        "gptj-wide": GPTJConfig(n_layer=2, n_embd=128, n_head=2, n_positions=64, rotary_dim=24,
                                activation_function="gelu", tie_word_embeddings=True, **ids),
        "neox-20b-head": GPTNeoXConfig(num_hidden_layers=2, hidden_size=192, num_attention_heads=2,
                                       intermediate_size=96, max_position_embeddings=64, rotary_pct=0.25, **ids),
        "neox-sequential": GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                         intermediate_size=96, max_position_embeddings=64, rotary_pct=0.5,
                                         use_parallel_residual=False, attention_bias=False, hidden_act="gelu_new",
                                         tie_word_embeddings=True, **ids),
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, str]:
    """name -> model folder; every weight random (biases and norms too: `conftest.random_model`)."""
    from transformers import AutoTokenizer

    from GPT2.config import BPE_TOKENIZER_DIR

    tok = AutoTokenizer.from_pretrained(BPE_TOKENIZER_DIR, local_files_only=True)
    return {name: random_model(config, tmp_path_factory.mktemp("models") / name, seed, BPE_TOKENIZER_DIR)
            for seed, (name, config) in enumerate(_tiny_configs(tok).items())}


def _run(workdir, model: dict, **flags):
    options = dict(working_dir=str(workdir), use_cache=True, use_mask=True, device="cpu", static_cache=True,
                   fused_decode=True)
    return make_context(registry.family("GPT2"), ModelOptions(**{**options, **flags, **model}))


@pytest.mark.parametrize("name", ["gptj-offline", "gpt-neox-offline"] + TINY)
def test_fused_graph_gives_hf_generate_tokens(name, tiny, workdir):
    run = _run(workdir, {"torch_dir": tiny[name]} if name in TINY else {"variant": name})
    config = run.source.config
    ids = torch.randint(0, config.vocab_size - 1, (ROWS, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    pad = run.tokenizer.pad_token_id
    with backend_steps(run, "onnxrt") as (backend, steps):
        assert isinstance(backend.onnx, FusedDecodeOnnx) and backend.onnx.record["built_from"] == "checkpoint files"
        assert backend.export_max_diff() < 1e-3  # validated against PyTorch when built
        nodes = backend.onnx.record["nodes"]
        layers = config.num_hidden_layers
        assert nodes["GroupQueryAttention"] == layers and not {"Reshape", "ScatterND", "Split"} & set(nodes)
        if config.model_type == "gptj":  # out_proj and fc_out one product over the branches' outputs side by side
            assert nodes["MatMul"] == 3 * layers + 1 and nodes["Concat"] == layers
            assert nodes["Add"] == 1  # the LM head's bias: the branches' sum is the joint product's
        else:
            assert nodes["MatMul"] == 4 * layers + 1 and "Concat" not in nodes
        assert nodes.get("Transpose", 0) == config.tie_word_embeddings  # a tied head's embedding: a transposed gather
        # per layer: 4 products, attention, Gelu, the branches' add or a second skip norm, the skip norm, a second
        # norm of a parallel residual's, the projection's bias; embedding (+ transpose), first norm, head (+ bias)
        assert sum(nodes.values()) <= 10 * layers + 5
        for beams in (1, 3):
            expected = hf_tokens(run, ids, mask, beams, None, pad, new=NEW)
            assert fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) == expected, f"beams={beams}"
        early = expected[0][2]  # a token the search emits early becomes the EOS: rows stop at different steps
        for beams in (1, 3):
            assert fused_tokens(steps, ids, mask, beams, early, pad, new=NEW) == \
                hf_tokens(run, ids, mask, beams, early, pad, new=NEW), f"eos, beams={beams}"
        mask[0, :2], mask[2, :4] = 0, 0  # left-padded rows: rotary positions from each row's own length
        for beams in (1, 3):
            assert fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) == \
                hf_tokens(run, ids, mask, beams, None, pad, new=NEW), f"padded, beams={beams}"


def test_widened_rotary_is_hf_rotation():
    """GPT-NeoX-20B's head (12 rotated pairs of 96 columns): the permuted, widened half-split rotation the op runs
    gives HF's q.k at every position; so does GPT-J-6B's (32 interleaved pairs of 256: no identity pairs)."""
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb as neox_rotary
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rotary

    order, width = fg.rotary_layout(96, [(j, 12 + j) for j in range(12)])
    assert width == 32 and sorted(order) == list(range(96))
    assert list(order[:12]) == list(range(12)) and list(order[16:28]) == list(range(12, 24))
    assert not {*order[12:16], *order[28:32]} & set(range(24))  # the identity pairs: unrotated columns
    assert fg.rotary_layout(256, [(2 * j, 2 * j + 1) for j in range(32)])[1] == 64
    generator = torch.Generator().manual_seed(0)
    positions = torch.arange(40)
    for head, rotary, interleaved in ((96, 24, False), (256, 64, True), (64, 24, True)):
        pairs = [(2 * j, 2 * j + 1) if interleaved else (j, rotary // 2 + j) for j in range(rotary // 2)]
        order, width = fg.rotary_layout(head, pairs)
        angle = positions[:, None] * 10000.0 ** (-torch.arange(0, rotary, 2) / rotary)  # [P, pairs]
        q, k = torch.randn(2, 1, 1, 40, head, generator=generator, dtype=torch.float64)
        if interleaved:
            hf = [gptj_rotary(t.transpose(1, 2)[..., :rotary], angle.sin()[None], angle.cos()[None]).transpose(1, 2)
                  for t in (q, k)]
            hf = [torch.cat([r, t[..., rotary:]], -1) for r, t in zip(hf, (q, k))]
        else:
            cos, sin = torch.cat([angle.cos()] * 2, -1)[None], torch.cat([angle.sin()] * 2, -1)[None]
            hf = neox_rotary(q, k, cos, sin)
        pad = width // 2 - rotary // 2
        cos = torch.cat([angle.cos(), torch.ones(40, pad, dtype=angle.dtype)], -1)
        sin = torch.cat([angle.sin(), torch.zeros(40, pad, dtype=angle.dtype)], -1)
        op = [_half_split(t[..., order], cos, sin, width) for t in (q, k)]
        assert torch.allclose(op[0] @ op[1].transpose(-1, -2), hf[0] @ hf[1].transpose(-1, -2), atol=1e-9)


def _half_split(x, cos, sin, width):
    """GroupQueryAttention's rotation (rotary_interleaved=0) of x's first `width` columns."""
    a, b, rest = x[..., :width // 2], x[..., width // 2:width], x[..., width:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], -1)


@pytest.mark.parametrize("name, constants", [
    ("gptj-wide", ("transformer.h.0.attn.bias", "transformer.h.1.attn.masked_bias")),
    ("neox-20b-head", ("gpt_neox.layers.0.attention.rotary_emb.inv_freq", "gpt_neox.layers.1.attention.bias"))])
def test_checkpoint_constants_build_extra_weights_refused(name, constants, tiny, tmp_path):
    """The constants old checkpoints store build (HF skips them too); a weight the graph does not model is
    refused by name."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from GPT2.export import FUSED_DECODE

    config = AutoConfig.from_pretrained(tiny[name])
    builder = registry.load(FUSED_DECODE[config.model_type])
    with torch.device("meta"):
        arch = AutoModelForCausalLM.from_config(config)
    tensors = load_file(f"{tiny[name]}/model.safetensors")
    for extra in ((), ("transformer.h.0.attn.q_norm.weight",)):
        path = tmp_path / f"{len(extra)}.safetensors"
        save_file({**tensors, **{c: torch.ones(4) for c in constants + extra}}, str(path))
        weights = fg.StateDict.of_files(arch, [path], "GPT2")
        if not extra:
            builder.build(arch, weights, fg.GraphBuilder(np.float32))
            continue
        with pytest.raises(ArtifactError, match=r"does not use 1 weights of this checkpoint "
                                                r"\(transformer.h.0.attn.q_norm.weight...\)"):
            builder.build(arch, weights, fg.GraphBuilder(np.float32))


def test_refusals():
    from transformers import GPTJConfig, GPTNeoXConfig

    from GPT2 import fused_onnx_gptj, fused_onnx_neox

    assert fused_onnx_gptj.refusal(GPTJConfig()) is None  # GPT-J-6B: head 256, 64 rotary columns
    assert fused_onnx_neox.refusal(GPTNeoXConfig()) is None  # GPT-NeoX-20B: head 96, 24 rotary columns
    assert "no fused op for activation 'relu'" in fused_onnx_gptj.refusal(GPTJConfig(activation_function="relu"))
    assert "no fused op for activation 'relu'" in fused_onnx_neox.refusal(GPTNeoXConfig(hidden_act="relu"))
    dynamic = GPTNeoXConfig(rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert "rope type 'dynamic' changes them with the sequence length" in fused_onnx_neox.refusal(dynamic)
    assert "head size is 8, its rotary columns 4" in fused_onnx_gptj.refusal(
        GPTJConfig(n_embd=64, n_head=8, rotary_dim=4))
    assert "head size is 16, its rotary columns 7" in fused_onnx_gptj.refusal(
        GPTJConfig(n_embd=64, n_head=4, rotary_dim=7))
    assert fused_onnx_gptj.refusal(GPTJConfig(n_embd=64, n_head=4, rotary_dim=10)) is None  # 5 pairs: widened to 8
    assert "head size is 24, its rotary columns 6" in fused_onnx_neox.refusal(
        GPTNeoXConfig(hidden_size=96, num_attention_heads=4))
    family = registry.family("GPT2")
    assert {"gptj", "gpt_neox"} <= set(registry.backend(family, "onnxrt").fused_decode_types())


def test_cli_generate(workdir):
    proc = run_cli("generate", "GPT2", "onnxrt", "--variant", "gpt-neox-offline", "--use-cache", "--static-cache",
                   "--fused-decode", "--prompt", "Hello", "--max-new-tokens", "4", "-wd", str(workdir), "--cpu")
    assert proc.returncode == 0, proc.stderr
    assert "fused decode graph:" in proc.stdout and "GroupQueryAttention 2" in proc.stdout, proc.stdout


@pytest.mark.skipif(DEVICE != "cuda", reason="the CUDA graphs of the fused step need HARNESS_TEST_DEVICE=cuda")
@pytest.mark.parametrize("name", ["gptj-offline", "gpt-neox-offline"] + TINY)
def test_cuda_graph_step_matches_uncaptured(name, tiny, workdir, capsys):
    model = {"torch_dir": tiny[name]} if name in TINY else {"variant": name}
    cuda = dict(device="cuda", fp16=True)
    graph, uncaptured = _run(workdir, model, **cuda, use_cuda_graph=True), _run(workdir, model, **cuda)
    ids = torch.randint(0, graph.source.config.vocab_size - 1, (ROWS, PROMPT),
                        generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :2], mask[2, :4] = 0, 0
    pad, results = graph.tokenizer.pad_token_id, {}
    for label, run in (("graph", graph), ("uncaptured", uncaptured)):
        with backend_steps(run, "onnxrt") as (backend, steps):
            assert isinstance(backend.onnx, FusedDecodeOnnx)
            nodes = backend.onnx.record["nodes"]
            assert "Linear" in nodes and "MatMul" not in nodes, nodes  # the products: this project's op
            results[label] = [fused_tokens(steps, ids, mask, beams, None, pad, new=NEW) for beams in (1, 3)]
    assert results["graph"] == results["uncaptured"]
    with capsys.disabled():  # fp16 kernels differ from HF's: reported, not asserted
        for beams, rows in zip((1, 3), results["graph"]):
            hf = hf_tokens(graph, ids, mask, beams, None, pad, new=NEW)
            diffs = [(r, next((i for i, (a, b) in enumerate(zip(f, h)) if a != b), min(len(f), len(h))))
                     for r, (f, h) in enumerate(zip(rows, hf)) if f != h]
            print(f"\n{name} fused graph vs HF fp16, beams={beams}: "
                  + (f"first differences (row, token): {diffs}" if diffs else "same tokens"))
